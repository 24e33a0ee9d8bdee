// The decode strategies of the LTX-2 video VAE around VideoVaeDecoder, as AutoencoderKLLTX2Video._decode dispatches
// them: spatial tiles (tiled_decode: latent tiles, blend_v / blend_h linear cross-fades over the pixel overlap, crop
// to the stride) and temporal windows (_temporal_tiled_decode, diffusers' use_framewise_decoding: latent windows of
// tile frames / ratio + 1 at a stride, every window after the first drops its last frame, blend_t over the frame
// overlap, crop to the stride), the windows tiled spatially when larger than a tile, as diffusers does with both
// on. Tiles and windows are decoded one at a time and blended into the output as they come (in the reference's
// order, so the in-place blends read the same neighbours), so the peak activation memory is one tile / window.
// The encoder's spatial tiles (tiled_encode: pixel tiles, each encoded, blended over the latent overlap, cropped to
// the latent stride) are streamed the same way. diffusers models/autoencoders/autoencoder_kl_ltx2.py is the
// reference.
// Note [Video VAE strategies] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/ATen.h>

#include "ddo/model/component_plan.hpp"
#include "video_vae_config.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_encoder.hpp"

namespace ddo::ltx2 {

// resident / leaf_offload decode in one piece (they differ in the Weights source only); tiled = diffusers'
// use_tiling; temporal_stream = use_framewise_decoding with use_tiling (windows, each tiled when it exceeds a tile).
enum class VideoVaeStrategy { resident, leaf_offload, tiled, temporal_stream };
const char * video_vae_strategy_name(VideoVaeStrategy s);

// The reference's tile attributes, in pixels / pixel frames (enable_tiling; tile_sample_min_num_frames /
// tile_sample_stride_num_frames). Defaults as diffusers.
struct VideoVaeTiling {
    int64_t tile_sample_min_height = 512, tile_sample_min_width = 512;
    int64_t tile_sample_stride_height = 448, tile_sample_stride_width = 448;
    int64_t tile_sample_min_num_frames = 16, tile_sample_stride_num_frames = 8;

    // From the plan (vae.tile_size, vae.tile_overlap: tile and tile - overlap in both directions) and
    // vae.temporal_frames (frames per window; stride = frames - temporal_compression_ratio, one latent frame of
    // overlap, as diffusers' 16 / 8). UsageError naming the key when a value is not a multiple of the VAE's
    // compression ratio, or leaves no stride.
    static VideoVaeTiling from_plan(const model::VaeTiles & tiles, int temporal_frames, const VideoVaeConfig & c);
};

// Called after each decoded tile / window piece with (done, total); may throw to stop the decode (interruption).
using VideoVaeProgress = std::function<void(int done, int total)>;

// AutoencoderKLLTX2Video._decode for `strategy`: temporal windows when temporal_stream and the clip has more latent
// frames than a window; else spatial tiles when tiled / temporal_stream and the latents exceed a tile; else one
// piece. z and timestep as VideoVaeDecoder::decode. UsageError when the tiling does not match the decoder's
// upscaling (compression ratios that differ from what the decoder does).
at::Tensor decode_video(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                        VideoVaeStrategy strategy, const VideoVaeTiling & tiling,
                        const VideoVaeProgress & progress = {});

// The two strategies on their own (decode_video's dispatch calls them): tiled_decode and _temporal_tiled_decode.
at::Tensor decode_video_tiled(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                              const VideoVaeTiling & tiling, const VideoVaeProgress & progress = {});
at::Tensor decode_video_temporal(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                                 const VideoVaeTiling & tiling, bool spatial_tiles,
                                 const VideoVaeProgress & progress = {});

// AutoencoderKLLTX2Video._encode with use_tiling (the temporal tiled encode, use_framewise_decoding, is not done):
// spatial tiles when the video is larger than a tile (tiled_encode: pixel tiles of tile_sample_min at
// tile_sample_stride, blend_v / blend_h over the latent overlap, crop to the latent stride, then to H / r x W / r),
// else VideoVaeEncoder::encode in one piece. `video` as VideoVaeEncoder::encode; progress after each tile.
// UsageError when spatial_compression_ratio differs from what the encoder does.
at::Tensor encode_video_tiled(const VideoVaeEncoder & encoder, const at::Tensor & video, const VideoVaeTiling & tiling,
                              const VideoVaeProgress & progress = {});

}  // namespace ddo::ltx2
