// What the Qwen3 and Gemma-3 text towers (qwen3_text_model.cpp, gemma3_text_model.cpp) share, written once: the
// config.json, the checkpoint's weight prefix, the decoder-layer loop over the model kit's execution groups (group 0 the embedding,
// group 1 + i decoder layer i), and the attention core (RoPE, transformers' repeat_kv, SDPA). Header-only, so the
// two static libraries (ddo_text_models, ddo_gemma3) each carry it without linking one another. The projections and
// norms around it stay in each tower: their op order differs (Qwen3 norms q/k before the head transpose, Gemma-3
// after) and must stay as the reference has it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/model/component_weights.hpp"

namespace ddo::text::tower {

// The text encoder's config.json (the whole file; the towers read its text_config when present). UsageError naming
// the file when it cannot be read or parsed.
inline nlohmann::json read_config_json(const std::filesystem::path & f) {
    std::ifstream in(f);
    if (!in) throw UsageError(f.string() + ": cannot read the text encoder's config.json; the checkpoint's "
                              "text_encoder/ folder must hold the config save_pretrained wrote");
    try {
        return nlohmann::json::parse(in);
    } catch (const std::exception & e) {
        throw UsageError(f.string() + ": not valid JSON (" + e.what() + ")");
    }
}

// The first of `prefixes` under which the checkpoint (`names`) holds embed_tokens.weight; `model` names the text
// encoder in the error ("a Qwen3-VL text encoder").
template <std::size_t N>
std::string find_weight_prefix(const std::vector<std::string> & names, const char * const (&prefixes)[N],
                               const std::string & model) {
    for (const char * p : prefixes) {
        const std::string want = std::string(p) + "embed_tokens.weight";
        for (const auto & n : names)
            if (n == want) return p;
    }
    std::string listed;
    for (const char * p : prefixes) listed += std::string(listed.empty() ? "" : " / ") + (*p ? p : "(none)");
    throw RuntimeError("text encoder checkpoint: no embed_tokens.weight under any of the prefixes " + listed +
                       "; is this " + model + " saved by transformers?");
}

// Acquires execution group `g`, runs fn(tensors) and releases the group.
template <class Fn>
auto with_group(model::ComponentWeights & weights, std::size_t g, Fn && fn) {
    const auto & t = weights.acquire(g);
    auto out = fn(t);
    weights.release(g);
    return out;
}

// Decoder layers 0 .. num_layers-1: check_interrupted(i) before each, layer(tensors, "<prefix>layers.<i>.", i) on
// group 1 + i, then on_layer(i + 1, num_layers). `cb` is any struct with those two optional std::functions.
template <class Callbacks, class Layer>
void for_each_layer(model::ComponentWeights & weights, std::int64_t num_layers, const std::string & weight_prefix,
                    const Callbacks & cb, Layer && layer) {
    const int total = int(num_layers);
    for (std::int64_t i = 0; i < num_layers; ++i) {
        if (cb.check_interrupted) cb.check_interrupted(int(i));
        const auto & t = weights.acquire(std::size_t(i + 1));
        layer(t, weight_prefix + "layers." + std::to_string(i) + ".", i);
        weights.release(std::size_t(i + 1));
        if (cb.on_layer) cb.on_layer(int(i + 1), total);
    }
}

inline at::Tensor rotate_half(const at::Tensor & x) {
    const auto half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Linear module `name` of the group, with its LoRA if one adapts it (Note [Applying LoRA]).
inline at::Tensor linear(const at::Tensor & x, const model::GroupTensors & t, const std::string & name, bool bias = false) {
    return t.linear(name, bias)(x);
}

// q [B, H, L, D], k and v [B, KV, L, D] -> attention output [B, L, H * D]: RoPE on q and k, each key/value head
// repeated for its H / KV queries (transformers' repeat_kv), SDPA with the boolean mask `allowed` (true = attend) or
// plain causal without one, rows scaled by `row_ok` when given (before the head transpose).
inline at::Tensor attend(at::Tensor q, at::Tensor k, at::Tensor v, const at::Tensor & cos, const at::Tensor & sin,
                         const std::optional<at::Tensor> & allowed, const std::optional<at::Tensor> & row_ok,
                         double scale) {
    const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), KV = k.size(1);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    if (KV != H) {
        k = k.repeat_interleave(H / KV, 1);
        v = v.repeat_interleave(H / KV, 1);
    }
    auto a = allowed ? at::scaled_dot_product_attention(q, k, v, *allowed, 0.0, false, scale)
                     : at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true, scale);
    if (row_ok) a = a * *row_ok;
    return a.transpose(1, 2).reshape({B, L, H * D});
}

}  // namespace ddo::text::tower
