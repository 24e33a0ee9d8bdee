// LTX2Attention with its two processors (LTX2AudioVideoAttnProcessor, LTX2PerturbedAttnProcessor; models.md §5.3)
// and the layers the DiT and the text connectors share: Linear, the weightless RMS norms, FeedForward
// (gelu-approximate, 4x). Reference: diffusers 0.42.1 models/transformers/transformer_ltx2.py, models/attention.py,
// models/normalization.py. Weights are read by checkpoint name from `w` (the caller holds the module's scope).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "rope.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// nn.Linear `<prefix>.weight` (+ `<prefix>.bias` when `bias`).
at::Tensor linear(Weights & w, const std::string & prefix, const at::Tensor & x, bool bias = true);
// diffusers RMSNorm without weight: fp32 variance, result in x's dtype (the DiT's norm1..3, a2v/v2a norms).
at::Tensor rms_norm(const at::Tensor & x, double eps);
// FeedForward(dim, "gelu-approximate"): net.0.proj -> GELU(tanh) -> net.2.
at::Tensor feed_forward(Weights & w, const std::string & prefix, const at::Tensor & x, bool bias = true);

// One LTX2Attention module: `prefix` is its checkpoint name ("transformer_blocks.3.attn1").
struct AttentionSpec {
    std::string prefix;
    int64_t heads = 1;
    bool gated = false;  // to_gate_logits present
    bool bias = true;    // to_q/k/v bias
    bool out_bias = true;
    double eps = 1e-6;   // norm_q / norm_k (torch RMSNorm with weight, across heads)
};

// STG of LTX2PerturbedAttnProcessor: per-sample weight [B, 1, 1] (1 = attention, 0 = value passthrough);
// `all_perturbed` skips the attention for the whole batch.
struct Perturbation {
    at::Tensor mask;
    bool all_perturbed = false;
};

// x [B, Sq, q_dim] attends to kv [B, Sk, kv_dim] (nullopt: self-attention). mask: additive [B, 1, Sk] or
// [B, 1, 1, Sk]. q_rope rotates q, k_rope k (q_rope when absent); no rope: none. Returns [B, Sq, q_dim].
at::Tensor attention(Weights & w, const AttentionSpec & spec, const at::Tensor & x,
                     const std::optional<at::Tensor> & kv, const std::optional<at::Tensor> & mask,
                     const RopeTables * q_rope, const RopeTables * k_rope,
                     const std::optional<Perturbation> & perturbation = std::nullopt);

}  // namespace ddo::ltx2
