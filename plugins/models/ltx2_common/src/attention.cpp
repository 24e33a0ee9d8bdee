// LTX2Attention and the shared layers (reference: diffusers 0.42.1 LTX2AudioVideoAttnProcessor.__call__,
// LTX2PerturbedAttnProcessor.__call__, FeedForward, RMSNorm; operations in their order).
#include "attention.hpp"

namespace ddo::ltx2 {

at::Tensor linear(Weights & w, const std::string & prefix, const at::Tensor & x, bool bias) {
    // With its LoRA when one adapts the module (Note [Applying LoRA]).
    const auto weight = prefix + ".weight";
    return model::linear(x, w.get(weight), bias ? std::optional<at::Tensor>(w.get(prefix + ".bias")) : std::nullopt,
                         w.lora(weight));
}

at::Tensor rms_norm(const at::Tensor & x, double eps) {
    auto variance = x.to(at::kFloat).pow(2).mean(-1, true);
    return (x * at::rsqrt(variance + eps)).to(x.scalar_type());
}

at::Tensor feed_forward(Weights & w, const std::string & prefix, const at::Tensor & x, bool bias) {
    auto h = at::gelu(linear(w, prefix + ".net.0.proj", x, bias), "tanh");
    return linear(w, prefix + ".net.2", h, bias);
}

at::Tensor attention(Weights & w, const AttentionSpec & spec, const at::Tensor & x,
                     const std::optional<at::Tensor> & kv_in, const std::optional<at::Tensor> & mask,
                     const RopeTables * q_rope, const RopeTables * k_rope,
                     const std::optional<Perturbation> & perturbation) {
    const auto & p = spec.prefix;
    const at::Tensor & kv = kv_in ? *kv_in : x;
    std::optional<at::Tensor> gate_logits;
    if (spec.gated) gate_logits = linear(w, p + ".to_gate_logits", x);
    auto value = linear(w, p + ".to_v", kv, spec.bias);
    at::Tensor h;
    if (perturbation && perturbation->all_perturbed) {
        h = value;  // skip attention: the value projection
    } else {
        auto q = linear(w, p + ".to_q", x, spec.bias);
        auto k = linear(w, p + ".to_k", kv, spec.bias);
        q = at::rms_norm(q, {q.size(-1)}, w.get(p + ".norm_q.weight"), spec.eps);
        k = at::rms_norm(k, {k.size(-1)}, w.get(p + ".norm_k.weight"), spec.eps);
        if (q_rope) {
            q = apply_rope(q, *q_rope);
            k = apply_rope(k, k_rope ? *k_rope : *q_rope);
        }
        auto heads = [&](const at::Tensor & t) { return t.unflatten(2, {spec.heads, -1}).transpose(1, 2); };
        std::optional<at::Tensor> m;
        if (mask) m = mask->dim() == 3 ? mask->unsqueeze(1) : *mask;  // [B, 1, 1, Sk], broadcast over heads
        h = at::scaled_dot_product_attention(heads(q), heads(k), heads(value), m);
        h = h.transpose(1, 2).flatten(2, 3).to(q.scalar_type());
        if (perturbation) h = at::lerp(value, h, perturbation->mask);
    }
    if (gate_logits) {
        auto gates = 2.0 * at::sigmoid(*gate_logits);  // [B, S, H]
        h = (h.unflatten(2, {spec.heads, -1}) * gates.unsqueeze(-1)).flatten(2, 3);
    }
    return linear(w, p + ".to_out.0", h, spec.out_bias);
}

}  // namespace ddo::ltx2
