#include "vae_choice.hpp"

#include <algorithm>

#include <c10/core/ScalarType.h>

#include "ddo/error.hpp"
#include "ddo/model/memory_budget.hpp"
#include "ddo/util/format_bytes.hpp"

namespace ddo::qwen_image_21 {

const char * vae_strategy_name(VaeStrategy s) {
    switch (s) {
    case VaeStrategy::resident: return "resident";
    case VaeStrategy::leaf_offload: return "leaf_offload";
    case VaeStrategy::tiled: return "tiled";
    }
    return "resident";
}

std::uint64_t estimate_decode_activation_bytes(const VaeConfig & c, std::int64_t batch, std::int64_t width,
                                               std::int64_t height, at::ScalarType dtype) {
    // The decoder runs from 1/16 resolution up; each resampling stage doubles h and w at its output channels. The
    // peak is at the stage with the most elements: its input and output tensors plus three temporaries of the same
    // size (normalised input, its SiLU, the causal convolution's padded input) live together: 5x the largest
    // activation (Note [Memory forecast]: with 4x, LibTorch's measured CPU peak was 1.28x the estimate at 256-1024).
    const auto stages = vae_up_stages(c);
    std::int64_t pixels = (width / c.scale_factor_spatial) * (height / c.scale_factor_spatial);
    std::uint64_t largest = std::uint64_t(c.decoder_base_dim * c.dim_mult.back()) * std::uint64_t(pixels);
    for (const auto & s : stages) {
        largest = std::max(largest, std::uint64_t(std::max(s.in_dim, s.out_dim)) * std::uint64_t(pixels));
        if (s.resample) {
            pixels *= 4;
            largest = std::max(largest, std::uint64_t(s.out_dim) * std::uint64_t(pixels));
        }
    }
    return 5 * largest * std::uint64_t(batch) * std::uint64_t(c10::elementSize(dtype));
}

VaeChoice choose_vae_strategy(const model::ComponentPlan & plan, const TensorFile & vae, const VaeConfig & c,
                              std::int64_t batch, std::int64_t width, std::int64_t height, at::ScalarType dtype) {
    VaeChoice out;
    const std::int64_t tile = plan.vae_tiles.tile, stride = plan.vae_tiles.stride();
    auto tiled = [&](std::string reason) {
        out.strategy = VaeStrategy::tiled;
        out.tiling = {tile, tile, stride, stride};
        out.reason = std::move(reason);
    };
    switch (plan.vae_strategy) {
    case VaeStrategyKind::resident: out.requested = "resident"; out.strategy = VaeStrategy::resident; return out;
    case VaeStrategyKind::leaf_offload: out.requested = "leaf_offload"; out.strategy = VaeStrategy::leaf_offload; return out;
    case VaeStrategyKind::tiled: out.requested = "tiled"; tiled("vae.strategy = tiled"); return out;
    case VaeStrategyKind::temporal_stream:
        throw UsageError("qwen_image_21: vae strategy temporal_stream is for video models; use resident, tiled or "
                         "leaf_offload");
    case VaeStrategyKind::automatic: break;
    }
    out.requested = "auto";
    std::uint64_t weights = 0;
    for (const auto & [name, shape] : vae_decoder_spec(c)) {
        std::uint64_t n = 1;
        for (auto d : shape) n *= std::uint64_t(d);
        weights += n * std::uint64_t(c10::elementSize(dtype));
    }
    const auto activations = estimate_decode_activation_bytes(c, batch, width, height, dtype);
    const auto budget = model::device_memory_available(plan);
    out.facts = {{"estimate_activation_bytes", activations}, {"weight_bytes", weights}, {"budget", budget.to_json()},
                 {"estimate", "Note [VAE auto] (docs/architecture.md)"}};
    const std::string need = format_mib(weights + activations) + " (weights " + format_mib(weights) +
                             " + decode activations ~" + format_mib(activations) + ")";
    if (!budget.bytes) {
        tiled("auto: the available memory is unknown (" + budget.source + "), so the bounded strategy; set "
              "capacities.device_budget_gb or vae.strategy to choose");
        return out;
    }
    const std::string have = format_mib(*budget.bytes) + " available (" + budget.source + ")";
    if (weights + activations <= *budget.bytes) {
        out.strategy = VaeStrategy::resident;
        out.reason = "auto: a one-piece resident decode fits: " + need + " <= " + have;
        return out;
    }
    if (plan.placement.cuda && activations <= *budget.bytes) {
        const auto host = model::host_memory_available(plan);
        if (host.bytes && weights <= *host.bytes) {
            out.strategy = VaeStrategy::leaf_offload;
            out.reason = "auto: resident does not fit (" + need + " > " + have + "); the activations fit with the "
                         "weights in host RAM (" + format_mib(*host.bytes) + " available): leaf_offload";
            return out;
        }
    }
    tiled("auto: a one-piece decode does not fit (" + need + " > " + have + "): tiled with vae.tile_size " +
          std::to_string(tile) + " / stride " + std::to_string(stride));
    return out;
}

}  // namespace ddo::qwen_image_21
