#include "ddo/model/linear.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"

namespace ddo::model {

// Note [Applying LoRA]: peft's LoraLayer.forward adds lora_B(lora_A(x)) * scaling to the base layer's output; here
// every LoRA of the module is one stacked pair with the scales folded into B, so the sum is one pair of matmuls.
at::Tensor linear(const at::Tensor & x, const at::Tensor & weight, const std::optional<at::Tensor> & bias,
                  const LoraDelta * lora) {
    auto y = at::linear(x, weight, bias);
    if (!lora) return y;
    if (lora->down.device() != weight.device() || lora->up.device() != weight.device())
        throw RuntimeError("the LoRA factors of " + lora->weight + " are on " + lora->down.device().str() + ", its weight on " +
                           weight.device().str() + ": a plugin attached them without ComponentLora::attach (Note [Applying LoRA])");
    ++lora->applied;
    // The up-projection accumulates into y inside the GEMM (beta = 1): no [tokens, out] temporary, no second pass.
    const auto h = at::linear(x, lora->down);
    if (!y.is_contiguous()) return y.add_(at::linear(h, lora->up));
    auto y2 = y.view({-1, y.size(-1)});
    y2.addmm_(h.reshape({-1, h.size(-1)}), lora->up.t());
    return y;
}

}  // namespace ddo::model
