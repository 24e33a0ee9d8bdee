// Spatial tiles and temporal windows of the LTX-2 video VAE decode (AutoencoderKLLTX2Video.tiled_decode,
// _temporal_tiled_decode, blend_v / blend_h / blend_t in diffusers autoencoder_kl_ltx2.py), streamed: each piece is
// decoded, blended in place with its already-blended neighbours as the reference does, and its crop copied into the
// preallocated output; only the previous row of tiles / the previous window's tail (what the next one blends with)
// stays alive.
#include "video_vae_tiling.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

// b[..., k, ...] = a[..., -extent + k, ...] * (1 - k / extent) + b[..., k, ...] * (k / extent) along `dim`, in place.
void blend(const at::Tensor & a, at::Tensor & b, int64_t extent, int64_t dim) {
    extent = std::min({a.size(dim), b.size(dim), extent});
    for (int64_t k = 0; k < extent; ++k) {
        const double t = double(k) / double(extent);
        auto dst = b.select(dim, k);
        dst.copy_(a.select(dim, a.size(dim) - extent + k) * (1.0 - t) + dst * t);
    }
}

void require_consistent(const VideoVaeConfig & c) {
    if (c.spatial_upscale() != c.spatial_compression_ratio || c.temporal_upscale() != c.temporal_compression_ratio)
        throw UsageError(c.file.string() + ": spatial_compression_ratio / temporal_compression_ratio (" +
                         std::to_string(c.spatial_compression_ratio) + " / " +
                         std::to_string(c.temporal_compression_ratio) + ") differ from what the decoder does (" +
                         std::to_string(c.spatial_upscale()) + " / " + std::to_string(c.temporal_upscale()) +
                         "); tiled and temporal decodes need them equal: set them in config.json or use "
                         "vae.strategy = resident");
}

void report(const VideoVaeProgress & progress, int & done, int total) {
    ++done;
    if (progress) progress(done, total);
}

int64_t count(int64_t extent, int64_t stride) { return (extent + stride - 1) / stride; }

// tiled_decode with an external progress count.
at::Tensor tiled(const VideoVaeDecoder & d, const at::Tensor & z, const at::Tensor & timestep, const VideoVaeTiling & t,
                 const VideoVaeProgress & progress, int & done, int total) {
    const auto & c = d.config();
    const int64_t r = c.spatial_compression_ratio;
    const int64_t height = z.size(3), width = z.size(4);
    const int64_t tile_h = t.tile_sample_min_height / r, tile_w = t.tile_sample_min_width / r;
    const int64_t step_h = t.tile_sample_stride_height / r, step_w = t.tile_sample_stride_width / r;
    const int64_t blend_h = t.tile_sample_min_height - t.tile_sample_stride_height;
    const int64_t blend_w = t.tile_sample_min_width - t.tile_sample_stride_width;
    const int64_t out_h = height * r, out_w = width * r;
    at::Tensor out;
    std::vector<at::Tensor> above;  // the previous row, blended
    for (int64_t i = 0, row = 0; i < height; i += step_h, ++row) {
        std::vector<at::Tensor> cur;
        for (int64_t j = 0, col = 0; j < width; j += step_w, ++col) {
            auto piece = z.narrow(3, i, std::min(tile_h, height - i)).narrow(4, j, std::min(tile_w, width - j));
            auto tile = d.decode(piece, timestep);
            report(progress, done, total);
            if (row > 0) blend(above[std::size_t(col)], tile, blend_h, 3);
            if (col > 0) blend(cur.back(), tile, blend_w, 4);
            if (!out.defined())
                out = at::empty({tile.size(0), tile.size(1), tile.size(2), out_h, out_w}, tile.options());
            const int64_t y = row * t.tile_sample_stride_height, x = col * t.tile_sample_stride_width;
            const int64_t h = std::min({tile.size(3), t.tile_sample_stride_height, out_h - y});
            const int64_t w = std::min({tile.size(4), t.tile_sample_stride_width, out_w - x});
            if (h > 0 && w > 0) out.narrow(3, y, h).narrow(4, x, w).copy_(tile.narrow(3, 0, h).narrow(4, 0, w));
            cur.push_back(std::move(tile));
        }
        above = std::move(cur);
    }
    return out;
}

bool needs_tiles(const VideoVaeConfig & c, const VideoVaeTiling & t, int64_t latent_h, int64_t latent_w) {
    return latent_w > t.tile_sample_min_width / c.spatial_compression_ratio ||
           latent_h > t.tile_sample_min_height / c.spatial_compression_ratio;
}

int tiles_per_piece(const VideoVaeConfig & c, const VideoVaeTiling & t, int64_t latent_h, int64_t latent_w) {
    const int64_t r = c.spatial_compression_ratio;
    return int(count(latent_h, t.tile_sample_stride_height / r) * count(latent_w, t.tile_sample_stride_width / r));
}

}  // namespace

const char * video_vae_strategy_name(VideoVaeStrategy s) {
    switch (s) {
    case VideoVaeStrategy::resident: return "resident";
    case VideoVaeStrategy::leaf_offload: return "leaf_offload";
    case VideoVaeStrategy::tiled: return "tiled";
    case VideoVaeStrategy::temporal_stream: return "temporal_stream";
    }
    return "resident";
}

VideoVaeTiling VideoVaeTiling::from_plan(const model::VaeTiles & tiles, int temporal_frames, const VideoVaeConfig & c) {
    const int64_t r = c.spatial_compression_ratio, rt = c.temporal_compression_ratio;
    const auto fix = " (the LTX-2 video VAE compresses " + std::to_string(r) + "x in space and " + std::to_string(rt) +
                     "x in time)";
    if (tiles.tile <= 0 || tiles.tile % r != 0)
        throw UsageError("vae.tile_size = " + std::to_string(tiles.tile) + " must be a positive multiple of " +
                         std::to_string(r) + fix);
    if (tiles.overlap < 0 || tiles.overlap % r != 0 || tiles.stride() <= 0)
        throw UsageError("vae.tile_overlap = " + std::to_string(tiles.overlap) + " must be a multiple of " +
                         std::to_string(r) + " from 0 to below vae.tile_size (" + std::to_string(tiles.tile) + ")" +
                         fix);
    if (temporal_frames <= rt || temporal_frames % rt != 0)
        throw UsageError("vae.temporal_frames = " + std::to_string(temporal_frames) + " must be a multiple of " +
                         std::to_string(rt) + " above " + std::to_string(rt) +
                         " (windows overlap by one latent frame)" + fix);
    VideoVaeTiling t;
    t.tile_sample_min_height = t.tile_sample_min_width = tiles.tile;
    t.tile_sample_stride_height = t.tile_sample_stride_width = tiles.stride();
    t.tile_sample_min_num_frames = temporal_frames;
    t.tile_sample_stride_num_frames = temporal_frames - rt;
    return t;
}

at::Tensor decode_video_tiled(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                              const VideoVaeTiling & tiling, const VideoVaeProgress & progress) {
    require_consistent(decoder.config());
    int done = 0;
    return tiled(decoder, z, timestep, tiling, progress, done,
                 tiles_per_piece(decoder.config(), tiling, z.size(3), z.size(4)));
}

namespace {

// _temporal_tiled_decode, each window's final frames handed to `sink` as they are cropped.
void temporal_windows(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                      const VideoVaeTiling & tiling, bool spatial_tiles, const VideoVaeProgress & progress,
                      const VideoFrameSink & sink) {
    const auto & c = decoder.config();
    require_consistent(c);
    const int64_t rt = c.temporal_compression_ratio;
    const int64_t frames = z.size(2);
    const int64_t window = tiling.tile_sample_min_num_frames / rt + 1;  // latent frames per window
    const int64_t step = tiling.tile_sample_stride_num_frames / rt;
    const int64_t keep = tiling.tile_sample_stride_num_frames;       // pixel frames each window adds
    const int64_t blend_frames = tiling.tile_sample_min_num_frames - tiling.tile_sample_stride_num_frames;
    const int64_t out_frames = (frames - 1) * rt + 1;
    const bool tiles = spatial_tiles && needs_tiles(c, tiling, z.size(3), z.size(4));
    // A window after the first that holds one latent frame decodes to one frame and drops it: nothing to decode.
    int64_t windows = 0;
    for (int64_t i = 0; i < frames; i += step)
        if (i == 0 || frames - i > 1) ++windows;
    const int total = int(windows) * (tiles ? tiles_per_piece(c, tiling, z.size(3), z.size(4)) : 1);
    int done = 0;
    at::Tensor previous;
    int64_t at_frame = 0;
    for (int64_t i = 0, k = 0; i < frames; i += step, ++k) {
        const int64_t n = std::min(window, frames - i);
        if (k > 0 && n == 1) break;
        const auto piece = z.narrow(2, i, n);
        at::Tensor decoded;
        if (tiles) {
            decoded = tiled(decoder, piece, timestep, tiling, progress, done, total);
        } else {
            decoded = decoder.decode(piece, timestep);
            report(progress, done, total);
        }
        int64_t take = keep + 1;
        if (k > 0) {
            decoded = decoded.narrow(2, 0, decoded.size(2) - 1);
            blend(previous, decoded, blend_frames, 2);
            take = keep;
        }
        take = std::min({take, decoded.size(2), out_frames - at_frame});
        if (take > 0) sink(decoded.narrow(2, 0, take));
        at_frame += std::max<int64_t>(take, 0);
        // Only the tail the next window blends with stays alive (a copy, so the window's frames can go).
        const int64_t tail = std::min(blend_frames, decoded.size(2));
        previous = decoded.narrow(2, decoded.size(2) - tail, tail).clone();
    }
    if (at_frame != out_frames)
        throw UsageError(c.file.string() + ": the temporal windows of vae.temporal_frames = " +
                         std::to_string(tiling.tile_sample_min_num_frames) + " cover " + std::to_string(at_frame) +
                         " of " + std::to_string(out_frames) + " frames; use another vae.temporal_frames");
}

}  // namespace

at::Tensor decode_video_temporal(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                                 const VideoVaeTiling & tiling, bool spatial_tiles, const VideoVaeProgress & progress) {
    const int64_t out_frames = (z.size(2) - 1) * decoder.config().temporal_compression_ratio + 1;
    at::Tensor out;
    int64_t at_frame = 0;
    temporal_windows(decoder, z, timestep, tiling, spatial_tiles, progress, [&](const at::Tensor & f) {
        if (!out.defined()) out = at::empty({f.size(0), f.size(1), out_frames, f.size(3), f.size(4)}, f.options());
        out.narrow(2, at_frame, f.size(2)).copy_(f);
        at_frame += f.size(2);
    });
    return out;
}

at::Tensor decode_video(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                        VideoVaeStrategy strategy, const VideoVaeTiling & tiling, const VideoVaeProgress & progress) {
    const auto & c = decoder.config();
    if (z.dim() != 5)
        throw UsageError("ltx2 video VAE decode: latents of shape " + model::shape_str(z.sizes()) +
                         ", expected [B, C, F', H', W']");
    const bool temporal = strategy == VideoVaeStrategy::temporal_stream;
    const bool spatial = temporal || strategy == VideoVaeStrategy::tiled;
    if (temporal && z.size(2) > tiling.tile_sample_min_num_frames / c.temporal_compression_ratio)
        return decode_video_temporal(decoder, z, timestep, tiling, true, progress);
    if (spatial && needs_tiles(c, tiling, z.size(3), z.size(4)))
        return decode_video_tiled(decoder, z, timestep, tiling, progress);
    auto out = decoder.decode(z, timestep);
    if (progress) progress(1, 1);
    return out;
}

void decode_video_frames(const VideoVaeDecoder & decoder, const at::Tensor & z, const at::Tensor & timestep,
                         VideoVaeStrategy strategy, const VideoVaeTiling & tiling, const VideoFrameSink & sink,
                         const VideoVaeProgress & progress) {
    const auto & c = decoder.config();
    if (z.dim() == 5 && strategy == VideoVaeStrategy::temporal_stream &&
        z.size(2) > tiling.tile_sample_min_num_frames / c.temporal_compression_ratio)
        return temporal_windows(decoder, z, timestep, tiling, true, progress, sink);
    sink(decode_video(decoder, z, timestep, strategy, tiling, progress));
}

at::Tensor encode_video_tiled(const VideoVaeEncoder & encoder, const at::Tensor & video, const VideoVaeTiling & t,
                              const VideoVaeProgress & progress) {
    const auto & c = encoder.config();
    if (video.dim() != 5)
        throw UsageError("ltx2 video VAE encode: video of shape " + model::shape_str(video.sizes()) +
                         ", expected [B, C, F, H, W]");
    const int64_t height = video.size(3), width = video.size(4);
    if (width <= t.tile_sample_min_width && height <= t.tile_sample_min_height) {
        auto out = encoder.encode(video);
        if (progress) progress(1, 1);
        return out;
    }
    const int64_t r = c.spatial_compression_ratio;
    if (c.spatial_downscale() != r)
        throw UsageError(c.file.string() + ": spatial_compression_ratio (" + std::to_string(r) +
                         ") differs from what the encoder does (" + std::to_string(c.spatial_downscale()) +
                         "); the tiled encode needs them equal: set it in config.json or use vae.strategy = resident");
    const int64_t step_h = t.tile_sample_stride_height / r, step_w = t.tile_sample_stride_width / r;
    const int64_t blend_h = t.tile_sample_min_height / r - step_h, blend_w = t.tile_sample_min_width / r - step_w;
    const int64_t out_h = height / r, out_w = width / r;
    const int total = int(count(height, t.tile_sample_stride_height) * count(width, t.tile_sample_stride_width));
    int done = 0;
    at::Tensor out;
    std::vector<at::Tensor> above;  // the previous row, blended
    for (int64_t i = 0, row = 0; i < height; i += t.tile_sample_stride_height, ++row) {
        std::vector<at::Tensor> cur;
        for (int64_t j = 0, col = 0; j < width; j += t.tile_sample_stride_width, ++col) {
            const auto piece = video.narrow(3, i, std::min(t.tile_sample_min_height, height - i))
                                   .narrow(4, j, std::min(t.tile_sample_min_width, width - j));
            auto tile = encoder.encode(piece);
            report(progress, done, total);
            if (row > 0) blend(above[std::size_t(col)], tile, blend_h, 3);
            if (col > 0) blend(cur.back(), tile, blend_w, 4);
            if (!out.defined())
                out = at::empty({tile.size(0), tile.size(1), tile.size(2), out_h, out_w}, tile.options());
            const int64_t y = row * step_h, x = col * step_w;
            const int64_t h = std::min({tile.size(3), step_h, out_h - y});
            const int64_t w = std::min({tile.size(4), step_w, out_w - x});
            if (h > 0 && w > 0) out.narrow(3, y, h).narrow(4, x, w).copy_(tile.narrow(3, 0, h).narrow(4, 0, w));
            cur.push_back(std::move(tile));
        }
        above = std::move(cur);
    }
    return out;
}

}  // namespace ddo::ltx2
