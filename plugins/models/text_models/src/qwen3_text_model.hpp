// The Qwen3 text tower (the language model of Qwen3-VL, transformers' Qwen3VLTextModel) on the text-only path:
// token embeddings -> decoder layers (RMSNorm, grouped-query attention with per-head q/k RMSNorm and RoPE, SwiGLU
// MLP) -> the last layer's output, before the final norm (what QwenImage21Pipeline reads: it hooks `norm` away).
// Its weights are execution groups of one model-kit component (group 0 the embedding table, group 1 + i decoder
// layer i), so every route and the planner apply to it as to a DiT.
//
// Text-only positions: Qwen3-VL's MRoPE gives a text token the same position on its three axes (t, h, w), so the
// interleaved sections pick the same angle whichever axis they read and the rotation is plain 1-D RoPE at that
// position (docs/architecture.md, Note [Text-only MRoPE]). Text-only positions are 0 .. L-1, padding included:
// Qwen3VLModel computes 3-D positions only when images are present.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/model/component_weights.hpp"

namespace ddo::text {

struct Qwen3TextConfig {
    std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
    std::int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 5e6;
    bool attention_bias = false;
    std::string weight_prefix;  // e.g. "model.language_model." (from the checkpoint's tensor names)

    // text_encoder/config.json of a Qwen3VLForConditionalGeneration (its text_config) or of a plain Qwen3 text
    // model. UsageError naming the file and key for a missing key or a value this tower does not implement
    // (hidden_act other than silu, a rope_type other than default, a vision-only config).
    static Qwen3TextConfig from_file(const std::filesystem::path & config_json);
};

// The execution groups of the tower in checkpoint names: "embed_tokens", then "layers.<i>". `tensor_names` are
// the checkpoint's names (to find the weight prefix); the vision tower and lm_head are never read.
std::vector<model::GroupSpec> qwen3_text_groups(Qwen3TextConfig & c, const std::vector<std::string> & tensor_names);

struct TextTowerCallbacks {
    std::function<void(int layer, int total)> on_layer;  // after each decoder layer
    std::function<void(int layer)> check_interrupted;    // before each decoder layer: throws to stop
};

// ids [B, L] int64 and mask [B, L] (1 = token, 0 = padding; left padding as the pipeline pads) -> the last
// decoder layer's output [B, L, hidden] in `dtype` on `device` (padded rows are defined but meaningless).
// Weights are acquired and released group by group from `weights`.
at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids, const at::Tensor & mask, at::ScalarType dtype,
                                         at::Device device, const TextTowerCallbacks & cb = {});

}  // namespace ddo::text
