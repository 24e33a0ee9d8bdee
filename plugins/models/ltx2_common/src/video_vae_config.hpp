// The LTX-2 video VAE's configuration (vae/config.json of AutoencoderKLLTX2Video, LTX-2.0 and 2.3/2.5), the
// up-block layout the reference derives from it (LTX2VideoDecoder3d.__init__: reversed lists, widths divided by the
// upsample factor, a conv_in resnet where widths change), the encoder's down blocks (LTX2VideoEncoder3d.__init__),
// the decoder's and the encoder's state-dict layouts and their validation, and the latents_mean / latents_std
// buffers. diffusers models/autoencoders/autoencoder_kl_ltx2.py is the reference.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/model/tensor_file.hpp"

namespace ddo::ltx2 {

// Conv3d padding_mode of the convolutions (decoder_spatial_padding_mode, encoder_spatial_padding_mode).
enum class SpatialPadding { zeros, reflect, replicate, circular };

// One LTX2VideoDownBlock3D of the encoder: `layers` resnets at `in_channels`, then (when `downsample`) the
// downsampler to `out_channels`: LTX2VideoDownsampler3d (space-to-depth of a causal conv to out / prod(stride)
// channels plus the group-mean residual) for the spatial / temporal / spatiotemporal types, or a plain causal conv
// of stride 2 ("conv", which keeps the width).
struct VideoVaeDownBlock {
    int64_t in_channels = 0;
    int64_t out_channels = 0;
    int64_t layers = 0;
    bool downsample = true;                  // spatio_temporal_scaling[i]
    bool strided_conv = false;               // downsample_type "conv"
    std::array<int64_t, 3> stride{2, 2, 2};  // (t, h, w) from downsample_type
};

// One LTX2VideoUpBlock3d after the reference's reversal: it takes the previous block's output (`input_width`
// channels), optionally a conv_in resnet to `width`, then the upsampler (conv to width * prod(stride) /
// upscale_factor channels, depth-to-space) to `out_channels`, then `layers` resnets at out_channels.
struct VideoVaeUpBlock {
    int64_t input_width = 0;      // channels entering the block (previous block's output)
    bool conv_in = false;         // a conv_in resnet input_width -> width (only with upscale_factor 1)
    int64_t width = 0;            // channels entering the upsampler (= upsampler in_channels)
    bool upsample = true;         // decoder_spatio_temporal_scaling[i]
    std::array<int64_t, 3> stride{2, 2, 2};  // (t, h, w) from upsample_type
    bool residual = false;        // upsample_residual
    int64_t upscale_factor = 1;   // upsample_factor
    int64_t out_channels = 0;     // channels of the resnets and the block output
    int64_t layers = 0;           // resnets
    int64_t time_embed_dim = 0;   // time_embedder width (4 x the reference's in_channels) when conditioned
};

struct VideoVaeConfig {
    std::filesystem::path file;  // where it was read (for messages)
    int64_t latent_channels = 128;
    int64_t out_channels = 3;
    std::vector<int64_t> decoder_block_out_channels{256, 512, 1024};
    std::vector<int64_t> decoder_layers_per_block{5, 5, 5, 5};
    std::vector<bool> decoder_spatio_temporal_scaling{true, true, true};
    std::vector<std::string> upsample_type{"spatiotemporal", "spatiotemporal", "spatiotemporal"};
    std::vector<bool> upsample_residual{true, true, true};
    std::vector<int64_t> upsample_factor{2, 2, 2};
    bool timestep_conditioning = false;
    int64_t patch_size = 4;
    int64_t patch_size_t = 1;
    double resnet_norm_eps = 1e-6;
    double scaling_factor = 1.0;
    bool decoder_causal = true;  // the class default; the converted 2.0 / 2.3 checkpoints say false
    SpatialPadding decoder_spatial_padding = SpatialPadding::reflect;
    // The encoder (LTX2VideoEncoder3d): in_channels, block_out_channels, down_block_types, layers_per_block (one per
    // block; the last entry is also the mid block's), spatio_temporal_scaling, downsample_type, encoder_causal (the
    // encoder runs with it: encode passes causal=None), encoder_spatial_padding_mode.
    int64_t in_channels = 3;
    std::vector<int64_t> block_out_channels{256, 512, 1024, 2048};
    std::vector<std::string> down_block_types{"LTX2VideoDownBlock3D", "LTX2VideoDownBlock3D", "LTX2VideoDownBlock3D",
                                              "LTX2VideoDownBlock3D"};
    std::vector<int64_t> layers_per_block{4, 6, 6, 2, 2};
    std::vector<bool> spatio_temporal_scaling{true, true, true, true};
    std::vector<std::string> downsample_type{"spatial", "temporal", "spatiotemporal", "spatiotemporal"};
    bool encoder_causal = true;
    SpatialPadding encoder_spatial_padding = SpatialPadding::zeros;
    // As the reference computes them (explicit in the real configs, else patch * 2^sum(spatio_temporal_scaling) of
    // the encoder): the tiled decodes divide pixel tile sizes by these.
    int64_t spatial_compression_ratio = 32;
    int64_t temporal_compression_ratio = 8;

    // Derived (from_json): conv_in width (= mid block width), mid block layers, the up blocks, conv_out input width.
    int64_t mid_channels = 0;
    int64_t mid_layers = 0;
    std::vector<VideoVaeUpBlock> up_blocks;
    int64_t final_channels = 0;
    // Derived (from_json): the encoder's down blocks, its mid block width (block_out_channels' last) and layers.
    std::vector<VideoVaeDownBlock> down_blocks;
    int64_t encoder_mid_channels = 0;
    int64_t encoder_mid_layers = 0;

    // The decoder's real upscaling: pixels per latent pixel (patch x 2^spatial upsamplers) and the frame map
    // F = (F' - 1) * temporal_upscale + 1 (each temporal upsampler maps T -> 2T - 1), times patch_size_t.
    int64_t spatial_upscale() const;
    int64_t temporal_upscale() const;
    int64_t decoded_frames(int64_t latent_frames) const;
    // The encoder's real downscaling: pixels per latent pixel (patch x 2^spatial downsamplers) and the latent frames
    // of F input frames (each temporal downsampler maps T -> (T + 1) / 2, a stride-2 conv T -> (T - 1) / 2 + 1), and
    // whether F frames / H x W pixels are a size the encoder can take (what the reference's reshapes need).
    int64_t spatial_downscale() const;
    int64_t encoded_frames(int64_t frames) const;
    bool encodable_frames(int64_t frames) const;
    bool encodable_pixels(int64_t pixels) const;

    // Why the encoder cannot run (the UsageError's message naming `file` and the key: an unknown down block or
    // downsampler type or padding mode, lists of the wrong length, widths the reference cannot run), or empty.
    // from_json keeps it instead of throwing, since runs that never encode (text-to-video) do not need the encoder
    // (Note [Components validated when used]); down_blocks is then empty.
    std::string encoder_refusal;
    // Throws UsageError with encoder_refusal when there is one, naming `use` (what needs the encoder, e.g. "--image
    // a.png"). Every encoder path calls it first (VideoVaeEncoder, video_vae_encoder_specs).
    void require_encoder(const std::string & use) const;

    // Throws UsageError naming `file` and the key for a value this decoder does not run (inject noise, an unknown up
    // block or sampler type or padding mode, lists of the wrong length, widths the reference cannot run); the
    // encoder's are kept in encoder_refusal.
    static VideoVaeConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    // <vae_dir>/config.json. Throws RuntimeError when it is missing or not JSON.
    static VideoVaeConfig load(const std::filesystem::path & vae_dir);
};

// Tensor name -> shape of everything the decoder reads (decoder.*), in the order the forward first uses them.
using VideoVaeWeightSpec = std::vector<std::pair<std::string, std::vector<int64_t>>>;
VideoVaeWeightSpec video_vae_decoder_specs(const VideoVaeConfig & c);

// Tensor name -> shape of everything the encoder reads (encoder.*), in the order the forward first uses them.
VideoVaeWeightSpec video_vae_encoder_specs(const VideoVaeConfig & c);

// Every tensor of video_vae_decoder_specs present in `f` with its shape and a floating dtype, and latents_mean /
// latents_std of [latent_channels] (from the header, nothing read). Throws RuntimeError naming tensor and file.
void validate_video_vae_checkpoint(const model::TensorFile & f, const VideoVaeConfig & c);

// The same for the encoder: every tensor of video_vae_encoder_specs, latents_mean / latents_std.
void validate_video_vae_encoder_checkpoint(const model::TensorFile & f, const VideoVaeConfig & c);

// Bytes of the decoder / encoder weights in `dtype` (for the strategy choice and the report).
std::uint64_t video_vae_decoder_weight_bytes(const VideoVaeConfig & c, at::ScalarType dtype);
std::uint64_t video_vae_encoder_weight_bytes(const VideoVaeConfig & c, at::ScalarType dtype);

// latents_mean / latents_std ([latent_channels], fp32, CPU) from the checkpoint (persistent buffers).
struct VideoLatentStats {
    at::Tensor mean;
    at::Tensor std;
};
VideoLatentStats read_video_latent_stats(const model::TensorFile & f, const VideoVaeConfig & c);

}  // namespace ddo::ltx2
