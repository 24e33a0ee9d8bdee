// vae.strategy for this VAE, with `auto` decided as seed 003's VAE table says (docs/architecture.md, Note [VAE
// auto]): resident when weights + the estimated decode activations fit the device's available memory; on CUDA,
// leaf_offload when the activations fit but the weights do not and host RAM holds them; otherwise tiled (the
// bounded choice, also taken when the available memory is unknown). The report records the estimate, the budget,
// its source and the reason.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "config.hpp"
#include "ddo/model/component_plan.hpp"
#include "vae_blocks.hpp"

namespace ddo::qwen_image_21 {

struct VaeChoice {
    VaeStrategy strategy = VaeStrategy::resident;
    VaeTiling tiling;          // used by tiled
    std::string requested;     // the setting: auto | resident | leaf_offload | tiled
    std::string reason;        // why this strategy
    nlohmann::json facts;      // {"estimate_bytes", "weight_bytes", "budget": {...}} for auto
};

// Peak bytes of one-piece decode activations of `batch` images of width x height (an estimate: the largest
// stage's input and output at its resolution, with the conv and norm temporaries of a residual block).
std::uint64_t estimate_decode_activation_bytes(const VaeConfig & c, std::int64_t batch, std::int64_t width,
                                               std::int64_t height, at::ScalarType dtype);

// UsageError for temporal_stream (a video strategy).
VaeChoice choose_vae_strategy(const model::ComponentPlan & plan, const TensorFile & vae, const VaeConfig & c,
                              std::int64_t batch, std::int64_t width, std::int64_t height, at::ScalarType dtype);

const char * vae_strategy_name(VaeStrategy s);

}  // namespace ddo::qwen_image_21
