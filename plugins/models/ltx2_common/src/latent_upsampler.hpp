// The LTX-2 latent upsampler (LTX2LatentUpsamplerModel.forward, dims 3): initial Conv3d + GroupNorm(32) + SiLU,
// ResBlocks, the upsampler (per frame: Conv2d + pixel shuffle, with BlurDownsample for the rational resampler; or
// Conv3d + temporal / spatiotemporal shuffle dropping the first frame), ResBlocks, final Conv3d; and the tensor work
// of the two-stage composition around it (LTX2Pipeline output_type="latent" de-normalises -> LTX2LatentUpsamplePipeline
// with latents_normalized=False, adain_factor, tone_map_compression_ratio -> LTX2Pipeline(latents=5-D) normalises
// again in prepare_latents). Every weight is read through ltx2::Weights inside the Scope of its execution group
// (latent_upsampler_groups), so the same code runs resident and on the engine.
// Reference: diffusers pipelines/ltx2/latent_upsampler.py, pipeline_ltx2_latent_upsample.py, pipeline_ltx2.py.
// Note [LTX2 latent upsampler] in docs/architecture.md.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "latent_upsampler_config.hpp"
#include "video_vae_config.hpp"
#include "video_vae_encoder.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

class LatentUpsampler {
public:
    // `config` copied; `weights` borrowed (must outlive the upsampler): its device and dtype are the compute device
    // and dtype (the reference runs in the weights' dtype). Nothing is read here: validate_latent_upsampler_checkpoint
    // checks the file up front.
    LatentUpsampler(LatentUpsamplerConfig config, Weights & weights);

    const LatentUpsamplerConfig & config() const { return config_; }
    at::Device device() const { return w_.device(); }
    at::ScalarType dtype() const { return w_.dtype(); }

    // x: [B, in_channels, F, H, W] (any device / dtype; moved to the compute device and dtype). Returns
    // [B, in_channels, out_frames(F), out_height(H), out_width(W)] in the compute dtype. UsageError for a wrong shape.
    at::Tensor forward(const at::Tensor & x) const;

private:
    at::Tensor conv(const at::Tensor & x, const std::string & p) const;
    at::Tensor group_norm(const at::Tensor & x, const std::string & p) const;
    at::Tensor res_block(const at::Tensor & x, const std::string & p) const;
    at::Tensor upsample(const at::Tensor & x) const;

    LatentUpsamplerConfig config_;
    Weights & w_;
};

// LTX2LatentUpsamplePipeline's optional filters (both off by default, as the reference's).
struct LatentUpsampleOptions {
    double adain_factor = 0.0;                // AdaIN blend toward the input's per-channel statistics; applied when > 0
    double tone_map_compression_ratio = 0.0;  // sigmoid tone mapping in [0, 1]; applied when > 0
};

// normalize_video_latents (the inverse of denormalize_video_latents) is video_vae_encoder.hpp's.

// Stage 1's normalised video latents -> stage 2's normalised initial latents, as diffusers' two-stage composition
// computes them: de-normalise in float32 with the VAE's `stats` and `scaling_factor` (LTX2Pipeline,
// output_type="latent"), cast to the upsampler's dtype, upsample, AdaIN against the upsampler's input and tone
// mapping when asked (LTX2LatentUpsamplePipeline), normalise again in the upsampler's dtype (LTX2Pipeline
// prepare_latents with 5-D latents). `latents`: [B, C, F', H', W'] (any device / dtype). Returns
// [B, C, F'', H'', W''] on the upsampler's device in its dtype (the dtype the reference's stage-2 prepare_latents
// packs and noises them in); the caller packs them (pack_video) and adds the stage-2 noise. UsageError for a wrong
// shape, channels that are not the upsampler's in_channels, or options outside the reference's ranges.
at::Tensor upsample_video_latents(const LatentUpsampler & upsampler, const at::Tensor & latents,
                                  const VideoLatentStats & stats, double scaling_factor,
                                  const LatentUpsampleOptions & options = {});
// The same from packed tokens [B, F'H'W', C] (patch size 1) of a latent video of `latent_frames` x `latent_height`
// x `latent_width` (LTX2Pipeline._unpack_latents first).
at::Tensor upsample_video_latents(const LatentUpsampler & upsampler, const at::Tensor & packed, int64_t latent_frames,
                                  int64_t latent_height, int64_t latent_width, const VideoLatentStats & stats,
                                  double scaling_factor, const LatentUpsampleOptions & options = {});

}  // namespace ddo::ltx2
