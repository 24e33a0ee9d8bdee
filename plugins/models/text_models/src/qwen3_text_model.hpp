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
//
// With condition images (VisionTokens): the embeddings at <|image_pad|> are replaced by the vision tower's merged
// embeds (image order = order in the sequence, masked_scatter), positions are the 3-D M-RoPE positions of
// Qwen3VLModel.get_rope_index (qwen3_vl_position_ids), the rotation takes each frequency from the axis the interleaved
// mrope_section gives it (Qwen3VLTextRotaryEmbedding.recomposition_frequencies), and the deepstack features are added
// at the image positions after decoder layers 0 .. k-1 (Qwen3VLTextModel._deepstack_process). Reference:
// transformers 5.24 models/qwen3_vl/modeling_qwen3_vl.py. Note [Qwen3-VL M-RoPE positions] in docs/architecture.md.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/memory_forecast.hpp"

namespace ddo::text {

struct Qwen3TextConfig {
    std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
    std::int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 5e6;
    bool attention_bias = false;
    // rope_parameters.mrope_section (t, h, w): frequency j (of head_dim / 2) reads the h axis when j % 3 == 1 and
    // j < 3 * h, the w axis when j % 3 == 2 and j < 3 * w, else t. transformers' default when the key is absent.
    std::array<std::int64_t, 3> mrope_section{24, 20, 20};
    // From a Qwen3VLForConditionalGeneration config (for VisionTokens): the root's image_token_id and
    // vision_config.spatial_merge_size; -1 / 0 when the file has none (a plain text model).
    std::int64_t image_token_id = -1, spatial_merge_size = 0;
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

// The vision tower's output for the images of a batch, in sequence order (batch row 0's images, then row 1's, ...),
// as Qwen3VLModel.get_image_features hands it to the language model.
struct VisionTokens {
    at::Tensor embeds;                                 // [N, hidden]: N = sum over images of t * h * w / merge^2
    std::vector<at::Tensor> deepstack;                 // k tensors [N, hidden], added after decoder layers 0 .. k-1
    std::vector<std::array<std::int64_t, 3>> grid_thw; // per image, in patches (the image processor's grid_thw)
    std::int64_t image_token_id = 0;                   // config.json image_token_id (<|image_pad|>)
    std::int64_t spatial_merge_size = 2;               // vision_config.spatial_merge_size
};

// Qwen3VLModel.get_rope_index for images: [3, B, L] int64 positions (t, h, w). Per row, over the tokens with mask 1:
// a run of text tokens counts on from the current position on all three axes; a run of image tokens takes the next
// grid (t, h / m, w / m) as current + (t index, row, column) and moves the current position on by max(h, w) / m.
// Padding gets 0. RuntimeError when the image tokens do not match the features: their count, a run whose length is
// not its grid's, fewer or more grids than runs.
at::Tensor qwen3_vl_position_ids(const at::Tensor & ids, const at::Tensor & mask, const VisionTokens & vision);

// ids [B, L] int64 and mask [B, L] (1 = token, 0 = padding; left padding as the pipeline pads) -> the last
// decoder layer's output [B, L, hidden] in `dtype` on `device` (padded rows are defined but meaningless).
// Weights are acquired and released group by group from `weights`.
at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids, const at::Tensor & mask, at::ScalarType dtype,
                                         at::Device device, const TextTowerCallbacks & cb = {});

// The same with condition images when `vision` is not null (borrowed for the call; its tensors may be on any device):
// the image embeds at the <|image_pad|> tokens, the 3-D M-RoPE positions, the deepstack sums. RuntimeError when the
// count of image pad tokens does not match the features (or the grids, or the deepstack tensors' shapes).
at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids, const at::Tensor & mask, const VisionTokens * vision,
                                         at::ScalarType dtype, at::Device device, const TextTowerCallbacks & cb = {});

// Note [Memory forecast]: what qwen3_last_hidden_before_norm holds at its peak on `tokens` tokens of batch `batch`,
// added to `s`: a decoder layer's MLP statement (proj(silu(proj(x)) * proj(x)): gate, SiLU, up and their product live
// together) beside the stream, its norm, the layer's q, k, v and attention output (named in the layer, alive to its
// end) and the RoPE tables. Its weights are the caller's to name (component text_encoder).
void qwen3_tower_memory(model::StageMemory & s, const Qwen3TextConfig & c, std::int64_t batch, std::int64_t tokens,
                        at::ScalarType dtype);

}  // namespace ddo::text
