// The Gemma-3 text tower (transformers' Gemma3TextModel, the language model of Gemma3ForConditionalGeneration that
// LTX2Pipeline runs on the text path): scaled token embeddings (x sqrt(hidden), the scale cast to the weight dtype)
// -> decoder layers (Gemma RMSNorm with weight + 1 in float32, grouped-query attention with per-head q/k norms, RoPE
// per layer type, scale query_pre_attn_scalar^-1/2, causal or causal sliding-window masks with the padding mask;
// post-attention norm, pre/post feed-forward norms, GELU-tanh gated MLP) -> the final norm. Returns every hidden
// state as `output_hidden_states=True` returns them: the embedding output, each layer's output, the last one after
// the final norm (num_layers + 1 tensors; LTX-2 stacks all of them, models.md §5.8).
// Its weights are execution groups of one model-kit component (group 0 the embedding table, group 1 + i decoder
// layer i, the last group the final norm), so every route and the planner apply to it as to a DiT.
//
// Positions are 0 .. L-1 whatever the padding (Gemma3TextModel falls back to arange); the masks are transformers'
// masking_utils ones: a query at i sees key j when j <= i, the key is not padding and, on sliding layers,
// j > i - sliding_window. A query that sees no key (a left-padded row) gets attention output 0, as the reference's
// SDPA gives; padded rows are defined but meaningless.
// Note [Gemma-3 masks and padded rows], Note [Gemma-3 hidden states] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"

namespace ddo::text {

struct Gemma3TextConfig {
    std::int64_t vocab_size = 262208, hidden_size = 2304, intermediate_size = 9216, num_layers = 26;
    std::int64_t num_heads = 8, num_kv_heads = 4, head_dim = 256;
    double rms_norm_eps = 1e-6;
    double query_pre_attn_scalar = 256;
    std::int64_t sliding_window = 4096;
    bool attention_bias = false;
    std::vector<bool> sliding;  // per layer: layer_types[i] == "sliding_attention"
    struct Rope {
        double theta = 10000;
        double linear_factor = 1;  // rope_type "linear": inv_freq / factor; "default": 1
    };
    Rope full_rope{1e6, 1}, sliding_rope{1e4, 1};
    std::string weight_prefix;  // e.g. "language_model.model." (from the checkpoint's tensor names)

    // text_encoder/config.json of a Gemma3ForConditionalGeneration (its text_config) or a plain Gemma3TextConfig;
    // missing keys take Gemma3TextConfig's defaults; both transformers 5's rope_parameters {full_attention,
    // sliding_attention} and 4.x's rope_theta / rope_local_base_freq / rope_scaling / sliding_window_pattern.
    // UsageError naming the file and key for a value this tower does not implement (hidden_activation other than
    // gelu_pytorch_tanh, a rope_type other than default/linear, attn_logit_softcapping, bidirectional attention).
    static Gemma3TextConfig from_file(const std::filesystem::path & config_json);
};

// The execution groups in checkpoint names: "embed_tokens", "layers.<i>", "norm". `tensor_names` are the
// checkpoint's names (to find the weight prefix: language_model.model. / model.language_model. / model. / none);
// the vision tower, the projector and lm_head are never read. RuntimeError when no prefix holds embed_tokens.weight.
std::vector<model::GroupSpec> gemma3_groups(Gemma3TextConfig & c, const std::vector<std::string> & tensor_names);

// Checks every tensor of gemma3_groups(c) from the header alone: present, the shape the config implies, floating.
// RuntimeError naming the tensor and the file. `c.weight_prefix` must be set (gemma3_groups).
void gemma3_check_weights(const model::TensorFile & checkpoint, const Gemma3TextConfig & c);

struct Gemma3Callbacks {
    std::function<void(int layer, int total)> on_layer;  // after each decoder layer
    std::function<void(int layer)> check_interrupted;    // before each decoder layer: throws to stop
};

// ids [B, L] int64 and mask [B, L] (1 = token, 0 = padding; left padding as the pipeline pads) -> num_layers + 1
// hidden states [B, L, hidden] in `dtype` on `device`. Weights are acquired and released group by group from
// `weights` (borrowed; groups of gemma3_groups(c)).
std::vector<at::Tensor> gemma3_hidden_states(model::ComponentWeights & weights, const Gemma3TextConfig & c,
                                             const at::Tensor & ids, const at::Tensor & mask, at::ScalarType dtype,
                                             at::Device device, const Gemma3Callbacks & cb = {});

}  // namespace ddo::text
