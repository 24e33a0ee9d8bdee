// A Linear module as model math uses it: y = x Wᵀ + b, plus a LoRA's low-rank term (x Aᵀ) Bᵀ when one adapts the
// module (Note [Applying LoRA] in docs/architecture.md). Every Linear of a model plugin goes through here, so that a
// LoRA reaches every module it names on every route and with every weight format, and never touches the stored bytes.
//
//   const auto & t = weights->acquire(i);
//   auto q = t.linear("transformer_blocks.3.attn.to_q")(x);        // weight, no bias, its LoRA if any
//   auto o = model::linear(x, w, b, lora);                          // the same from parts
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace ddo::model {

// One adapted module's factors, in the compute dtype on the compute device: every LoRA's A stacked along the rank and
// every B times its scale beside it, so that n LoRAs cost one pair of skinny matmuls (issue 27).
struct LoraDelta {
    at::Tensor down;  // [R, in], on the device of the weight it adapts (ComponentLora::attach)
    at::Tensor up;    // [out, R], scale folded in
    std::string weight;  // the adapted weight's name ("<module>.weight"), for messages
    // How often the term was added, and whether the module's weight was handed to the model (a group holding it was
    // acquired): a LoRA handed out and never added means the plugin read the weight without linear() -- reported.
    mutable std::uint64_t applied = 0;
    mutable bool handed_out = false;
    // lora.apply = "merge": the product was added once into the module's resident weight (Note [Applying LoRA]); the
    // delta is then never handed out with it.
    mutable bool merged = false;
};

// x Wᵀ (+ b) (+ (x Aᵀ) Bᵀ): `lora` may be null (borrowed). Factors on another device than `weight` are a kit defect
// (ComponentLora::attach places them): RuntimeError naming the weight and both devices, never a silent transfer.
at::Tensor linear(const at::Tensor & x, const at::Tensor & weight, const std::optional<at::Tensor> & bias,
                  const LoraDelta * lora);

struct Linear {
    at::Tensor weight;                 // [out, in]
    std::optional<at::Tensor> bias;    // [out]
    const LoraDelta * lora = nullptr;  // borrowed from the component's LoRA set; null: none adapts it

    at::Tensor operator()(const at::Tensor & x) const { return linear(x, weight, bias, lora); }
};

}  // namespace ddo::model
