// choose_video_vae_strategy: vae.strategy for the LTX-2 video VAE with `auto` per seed 003's VAE decode table
// (Note [Video VAE auto]); the activation estimate walks the decoder's stages as LTX2VideoDecoder3d runs them.
#include "video_vae_choice.hpp"

#include "ddo/torch/conv3d.hpp"

#include <algorithm>

#include <c10/core/ScalarType.h>

#include "ddo/error.hpp"
#include "ddo/model/memory_budget.hpp"
#include "ddo/util/format_bytes.hpp"

namespace ddo::ltx2 {

std::uint64_t estimate_video_decode_activation_bytes(const VideoVaeConfig & c, std::int64_t batch,
                                                     std::int64_t latent_frames, std::int64_t latent_h,
                                                     std::int64_t latent_w, at::ScalarType dtype, bool cpu) {
    std::uint64_t f = std::uint64_t(latent_frames), h = std::uint64_t(latent_h), w = std::uint64_t(latent_w);
    auto at_size = [&](std::int64_t channels) { return std::uint64_t(channels) * f * h * w; };
    const std::uint64_t e = c10::elementSize(dtype);
    // A resnet's convolutions at `channels` and the current resolution: the input, the normalised SiLU and the padded
    // copy live with the conv's column buffer when it takes an im2col path on the CPU.
    std::uint64_t resnet_peak = 0;
    auto resnet_at = [&](std::int64_t channels) {
        if (!cpu) return;
        const auto columns = torch::conv3d_column_bytes(channels, channels, 3, std::int64_t(f) + 2, std::int64_t(h) + 2,
                                                        std::int64_t(w) + 2, dtype);
        // The padded copy has two more frames (causal: the first repeated twice; else one each side) and a border.
        const std::uint64_t padded = std::uint64_t(channels) * (f + 2) * (h + 2) * (w + 2);
        resnet_peak = std::max(resnet_peak, ((2 * at_size(channels) + padded) * e + columns) * std::uint64_t(batch));
    };
    std::uint64_t largest = at_size(std::max(c.latent_channels, c.mid_channels));
    if (c.mid_layers > 0) resnet_at(c.mid_channels);
    for (const auto & b : c.up_blocks) {
        if (b.conv_in) largest = std::max(largest, at_size(std::max(b.input_width, b.out_channels)));
        if (b.upsample) {
            // The upsampler's conv output (before depth-to-space) at the input resolution.
            largest = std::max(largest, at_size(b.width * b.stride[0] * b.stride[1] * b.stride[2] / b.upscale_factor));
            f = f * std::uint64_t(b.stride[0]) - std::uint64_t(b.stride[0] - 1);
            h *= std::uint64_t(b.stride[1]);
            w *= std::uint64_t(b.stride[2]);
        }
        largest = std::max(largest, at_size(b.out_channels));
        if (b.layers > 0) resnet_at(b.out_channels);
    }
    largest = std::max(largest, at_size(c.out_channels * c.patch_size * c.patch_size));
    return std::max(4 * largest * std::uint64_t(batch) * e, resnet_peak);
}

model::ComponentPlan video_vae_plan(const model::ComponentPlan & vae, const VideoVaeChoice & choice) {
    auto plan = vae;
    if (choice.strategy == VideoVaeStrategy::leaf_offload) plan.route = engine::Route::dynamic;
    return plan;
}

VideoVaeDecision decide_video_vae_strategy(std::uint64_t weight_bytes, std::uint64_t clip_activations,
                                           std::uint64_t window_activations, bool temporal, bool cuda,
                                           std::optional<std::uint64_t> device_budget,
                                           const std::string & device_budget_source,
                                           std::optional<std::uint64_t> host_budget, const VideoVaeTiling & tiling) {
    const std::string bounded_what =
        temporal ? "temporal_stream with windows of vae.temporal_frames " +
                       std::to_string(tiling.tile_sample_min_num_frames) + " (stride " +
                       std::to_string(tiling.tile_sample_stride_num_frames) + " frames), each tiled by vae.tile_size " +
                       std::to_string(tiling.tile_sample_min_width) + " / stride " +
                       std::to_string(tiling.tile_sample_stride_width) + " when larger"
                 : "tiled with vae.tile_size " + std::to_string(tiling.tile_sample_min_width) + " / stride " +
                       std::to_string(tiling.tile_sample_stride_width);
    const auto bounded = temporal ? VideoVaeStrategy::temporal_stream : VideoVaeStrategy::tiled;
    if (!device_budget)
        return {bounded, "auto: the available memory is unknown (" + device_budget_source +
                             "), so the bounded strategy: " + bounded_what +
                             "; set capacities.device_budget_gb or vae.strategy to choose"};
    const std::string need = format_mib(weight_bytes + clip_activations) + " (weights " + format_mib(weight_bytes) +
                             " + one-piece decode activations ~" + format_mib(clip_activations) + ")";
    const std::string have = format_mib(*device_budget) + " available (" + device_budget_source + ")";
    if (weight_bytes + clip_activations <= *device_budget)
        return {VideoVaeStrategy::resident, "auto: a one-piece resident decode fits: " + need + " <= " + have};
    if (cuda && clip_activations <= *device_budget && host_budget && weight_bytes <= *host_budget)
        return {VideoVaeStrategy::leaf_offload, "auto: resident does not fit (" + need + " > " + have +
                                                    "); the activations fit with the weights in host RAM (" +
                                                    format_mib(*host_budget) + " available): leaf_offload"};
    std::string reason = "auto: a one-piece decode does not fit (" + need + " > " + have + "): " + bounded_what +
                         " (one piece ~" + format_mib(weight_bytes + window_activations) + ")";
    if (weight_bytes + window_activations > *device_budget)
        reason += "; even one piece is estimated above the budget: reduce vae.tile_size / vae.temporal_frames, the "
                  "resolution or the duration if the decode runs out of memory";
    return {bounded, reason};
}

VideoVaeChoice choose_video_vae_strategy(const model::ComponentPlan & plan, const model::TensorFile & vae,
                                         const VideoVaeConfig & c, std::int64_t batch, std::int64_t frames,
                                         std::int64_t width, std::int64_t height, at::ScalarType dtype,
                                         int temporal_frames) {
    VideoVaeChoice out;
    out.tiling = VideoVaeTiling::from_plan(plan.vae_tiles, temporal_frames, c);
    switch (plan.vae_strategy) {
    case VaeStrategyKind::resident: out.requested = "resident"; out.strategy = VideoVaeStrategy::resident;
        out.reason = "vae.strategy = resident"; return out;
    case VaeStrategyKind::leaf_offload: out.requested = "leaf_offload"; out.strategy = VideoVaeStrategy::leaf_offload;
        out.reason = "vae.strategy = leaf_offload"; return out;
    case VaeStrategyKind::tiled: out.requested = "tiled"; out.strategy = VideoVaeStrategy::tiled;
        out.reason = "vae.strategy = tiled"; return out;
    case VaeStrategyKind::temporal_stream: out.requested = "temporal_stream";
        out.strategy = VideoVaeStrategy::temporal_stream; out.reason = "vae.strategy = temporal_stream"; return out;
    case VaeStrategyKind::automatic: break;
    }
    out.requested = "auto";
    validate_video_vae_checkpoint(vae, c);
    const auto & t = out.tiling;
    const std::int64_t r = c.spatial_compression_ratio, rt = c.temporal_compression_ratio;
    const std::int64_t lf = (frames - 1) / rt + 1, lh = height / r, lw = width / r;
    const std::int64_t window_frames = t.tile_sample_min_num_frames / rt;
    const bool temporal = lf > window_frames;
    const std::int64_t tile_h = t.tile_sample_min_height / r, tile_w = t.tile_sample_min_width / r;
    const std::uint64_t weights = video_vae_decoder_weight_bytes(c, dtype);
    const bool cpu = !plan.placement.cuda;
    const std::uint64_t clip = estimate_video_decode_activation_bytes(c, batch, lf, lh, lw, dtype, cpu);
    const std::uint64_t piece = estimate_video_decode_activation_bytes(
        c, batch, temporal ? window_frames + 1 : lf, std::min(lh, tile_h), std::min(lw, tile_w), dtype, cpu);
    const auto budget = model::device_memory_available(plan);
    std::optional<model::MemoryBudget> host;
    if (plan.placement.cuda) host = model::host_memory_available(plan);
    const auto d = decide_video_vae_strategy(weights, clip, piece, temporal, plan.placement.cuda, budget.bytes,
                                             budget.source, host ? host->bytes : std::nullopt, t);
    out.strategy = d.strategy;
    out.reason = d.reason;
    out.facts = {{"estimate_activation_bytes", clip},
                 {"estimate_window_activation_bytes", piece},
                 {"weight_bytes", weights},
                 {"budget", budget.to_json()},
                 {"host_budget", host ? host->to_json() : nlohmann::json(nullptr)},
                 {"latent_shape", {batch, c.latent_channels, lf, lh, lw}},
                 {"estimate", "Note [Video VAE auto] (docs/architecture.md)"}};
    return out;
}

}  // namespace ddo::ltx2
