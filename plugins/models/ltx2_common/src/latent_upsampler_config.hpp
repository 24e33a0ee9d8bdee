// The LTX-2 latent upsampler's configuration (latent_upsampler/config.json of LTX2LatentUpsamplerModel: LTX-2.0 x2
// with the rational resampler, LTX-2.3 x2 plain pixel shuffle, x1.5 rational, temporal x2), its state-dict layout,
// the checkpoint validation, and the check that an upsampler fits the video VAE it runs beside.
// Reference: diffusers pipelines/ltx2/latent_upsampler.py (LTX2LatentUpsamplerModel.__init__,
// SpatialRationalResampler, RATIONAL_RESAMPLER_SCALE_MAPPING). Note [LTX2 latent upsampler] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "video_vae_config.hpp"

namespace ddo::ltx2 {

// What the upsampler module does between the two ResBlock stages.
enum class LatentUpsamplerKind {
    spatial,           // Conv2d mid -> 4 mid per frame + 2-D pixel shuffle (x2; use_rational_resampler false)
    spatial_rational,  // Conv2d mid -> num^2 mid per frame, pixel shuffle(num), BlurDownsample(stride den)
    temporal,          // Conv3d mid -> 2 mid + 1-D (frame) shuffle, first output frame dropped
    spatiotemporal,    // Conv3d mid -> 8 mid + 3-D shuffle (2, 2, 2), first output frame dropped
};

struct LatentUpsamplerConfig {
    std::filesystem::path file;  // where it was read (for messages)
    int64_t in_channels = 128;
    int64_t mid_channels = 1024;
    int64_t num_blocks_per_stage = 4;
    int64_t dims = 3;
    bool spatial_upsample = true;
    bool temporal_upsample = false;
    double rational_spatial_scale = 2.0;
    bool use_rational_resampler = true;

    // Derived (from_json).
    LatentUpsamplerKind kind = LatentUpsamplerKind::spatial_rational;
    int64_t num = 2, den = 1;  // rational resampler: pixel shuffle by num, blur + stride den (plain spatial: 2, 1)

    // The upsampler conv's output channels (mid * num^2, 2 mid, 8 mid).
    int64_t upsampler_out_channels() const;
    // Output sizes for an input latent of (frames, height, width), as the reference computes them.
    int64_t out_frames(int64_t frames) const;
    int64_t out_height(int64_t height) const;
    int64_t out_width(int64_t width) const;
    // "spatial x2", "spatial rational x1.5 (3/2)", "temporal x2", ... (for the report and messages).
    std::string describe() const;

    // Throws UsageError naming `file` and the key for a value this implementation does not run (dims 2, neither
    // spatial nor temporal upsampling, a rational scale outside {0.75, 1.5, 2.0, 4.0}, widths GroupNorm(32) cannot
    // take); RuntimeError for a key of the wrong type.
    static LatentUpsamplerConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    // <dir>/config.json. Throws RuntimeError when it is missing or not JSON.
    static LatentUpsamplerConfig load(const std::filesystem::path & dir);
    // The config a checkpoint without config.json implies (a single .safetensors such as Lightricks'
    // ltx-2.3-spatial-upscaler-x2-1.1.safetensors), from the weight shapes as sd.cpp's ltx_latent_upscaler.hpp
    // detects it: in / mid channels from initial_conv.weight, blocks from res_blocks.<i>, dims from the conv rank,
    // the upsampler from its conv (upsampler.conv.* = rational, num^2 = out / mid: 4 -> x2, 9 -> x1.5 (0.75 has the
    // same shapes and is not told apart), 16 -> x4; upsampler.0.* 4-D with 4 mid = plain x2, 5-D with 2 mid =
    // temporal, 8 mid = spatiotemporal). `file` names the source in messages. Throws RuntimeError naming the tensor
    // and file when the shapes fit no variant, UsageError (as from_json) for a variant not implemented.
    static LatentUpsamplerConfig from_weights(const model::TensorFile & f, const std::filesystem::path & file);
};

// Tensor name -> shape of everything the forward reads, in the order it first uses them. The rational resampler's
// blur kernel buffer (upsampler.blur_down.kernel, [1, 1, 5, 5]) is not listed: the forward reads it when the
// checkpoint holds it (save_pretrained writes it) and builds the binomial kernel otherwise.
using LatentUpsamplerWeightSpec = std::vector<std::pair<std::string, std::vector<int64_t>>>;
LatentUpsamplerWeightSpec latent_upsampler_specs(const LatentUpsamplerConfig & c);

// The stored blur kernel's name and shape.
inline constexpr const char * kLatentUpsamplerBlurKernel = "upsampler.blur_down.kernel";

// Every tensor of latent_upsampler_specs present in `f` with its shape and a floating dtype (from the header,
// nothing read), and the blur kernel's shape when stored. Throws RuntimeError naming tensor and file.
void validate_latent_upsampler_checkpoint(const model::TensorFile & f, const LatentUpsamplerConfig & c);

// The upsampler runs on the VAE's latents: its in_channels must equal the VAE's latent_channels. Throws UsageError
// naming both config files and the two values otherwise.
void check_latent_upsampler_fits_vae(const LatentUpsamplerConfig & up, const VideoVaeConfig & vae);

// Execution groups, in execution order: "initial" (initial_conv, initial_norm), "res_blocks.<i>", "upsampler" (its
// conv; the blur kernel when `f` holds it), "post_upsample_res_blocks.<i>", "final_conv".
std::vector<model::GroupSpec> latent_upsampler_groups(const LatentUpsamplerConfig & c, const model::TensorFile & f);

// Bytes of the weights in `dtype` (for the report and the residency choice).
std::uint64_t latent_upsampler_weight_bytes(const LatentUpsamplerConfig & c, at::ScalarType dtype);

}  // namespace ddo::ltx2
