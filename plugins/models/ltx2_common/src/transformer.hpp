// LTX2VideoTransformer3DModel (the LTX-2 audio+video DiT, models.md §5.5-5.7) in ATen, split for the engine: each
// block is one execution group. prepare() does everything before the blocks (text masks, the four RoPE tables,
// proj_in, AdaLN-single time embeddings incl. the 2.3 prompt AdaLN and the cross-modal globals, the 2.0 caption
// projections) in scope "globals"; run_block() applies LTX2VideoTransformerBlock i in scope "transformer_blocks.<i>";
// finish() applies the output norms and projections. Reference: diffusers 0.42.1
// models/transformers/transformer_ltx2.py (LTX2VideoTransformer3DModel.forward, LTX2VideoTransformerBlock.forward,
// LTX2AdaLayerNormSingle). Math runs in the weights' dtype on their device; RoPE in fp32.
// Note [LTX-2 block scopes], Note [LTX-2 STG semantics], Note [Exact fp32 parity] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/model/tensor_file.hpp"

#include "attention.hpp"
#include "rope.hpp"
#include "transformer_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

using TensorSpecs = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Checks that `f` (borrowed) holds exactly `specs`: each present with its shape and a floating dtype, nothing else.
// Throws RuntimeError naming the first offending tensor, its file and `component`.
void validate_tensors(const model::TensorFile & f, const TensorSpecs & specs, const std::string & component);

// (name, shape) of every DiT tensor the config implies, globals first, then block 0, 1, ...
TensorSpecs tensor_specs(const TransformerConfig & c);
// Presence, shapes and floating dtypes of every tensor, and no tensor the config does not imply. Throws
// RuntimeError naming the first offending tensor and the file (`f` borrowed).
void validate_transformer(const model::TensorFile & f, const TransformerConfig & c);
// Group 0 "globals" (every tensor outside transformer_blocks.*), then "transformer_blocks.<i>".
std::vector<model::GroupSpec> transformer_groups(const TransformerConfig & c);

// LTX2AdaLayerNormSingle `prefix` on timestep [N] (values as the DiT receives them): (linear(silu(emb)) [N, n*dim],
// emb [N, dim]).
std::pair<at::Tensor, at::Tensor> adaln_single(Weights & w, const std::string & prefix, const at::Tensor & timestep);

// The reference forward's arguments (LTX2VideoTransformer3DModel.forward).
struct TransformerInputs {
    at::Tensor hidden_states;                // [B, N_v, in_channels]
    at::Tensor audio_hidden_states;          // [B, N_a, audio_in_channels]
    at::Tensor encoder_hidden_states;        // [B, L, caption_channels] (2.0) / [B, L, cross_attention_dim]
    at::Tensor audio_encoder_hidden_states;  // [B, L, caption_channels] / [B, L, audio_cross_attention_dim]
    at::Tensor timestep;                     // [B] or [B, N_v] (per-token), sigma * 1000
    std::optional<at::Tensor> audio_timestep;  // default: timestep
    std::optional<at::Tensor> sigma;           // 2.3 prompt AdaLN and use_cross_timestep
    std::optional<at::Tensor> audio_sigma;     // default: sigma
    std::optional<at::Tensor> encoder_attention_mask;        // [B, L] binary
    std::optional<at::Tensor> audio_encoder_attention_mask;  // [B, L] binary
    std::optional<int64_t> num_frames, height, width;        // latent grid, when video_coords is absent
    double fps = 24.0;
    std::optional<int64_t> audio_num_frames;                 // when audio_coords is absent
    std::optional<at::Tensor> video_coords;                  // [B, 3, N_v, 2]
    std::optional<at::Tensor> audio_coords;                  // [B, 1, N_a, 2]
    bool isolate_modalities = false;                         // skip a2v / v2a in every block
    std::vector<int64_t> spatio_temporal_guidance_blocks;    // STG blocks (perturbed_attn checkpoints)
    std::optional<at::Tensor> perturbation_mask;             // [B] or [B, 1, 1]: 0 = perturb; default all zeros
    bool use_cross_timestep = false;
    std::optional<at::Tensor> video_keyframes_mask;          // [B, N_v, 1] (use_keyframes_abs_pos_embedding)
};

// Everything a block reads besides its weights (LTX2VideoTransformerBlock.forward's arguments). Owned tensors.
struct TransformerState {
    at::Tensor x, a;                    // video [B, N_v, D], audio [B, N_a, Da]
    at::Tensor text, audio_text;        // [B, L, D], [B, L, Da] (after the 2.0 caption projections)
    std::optional<at::Tensor> text_mask, audio_text_mask;  // additive [B, 1, L]
    at::Tensor temb, temb_audio;        // [B, 1|N_v, n*D], [B, 1|N_a, n*Da]
    at::Tensor embedded_timestep, audio_embedded_timestep;  // for finish()
    at::Tensor temb_ca_scale_shift, temb_ca_audio_scale_shift, temb_ca_gate, temb_ca_audio_gate;
    std::optional<at::Tensor> temb_prompt, temb_prompt_audio;  // 2.3 prompt AdaLN
    RopeTables video_rope, audio_rope, cross_video_rope, cross_audio_rope;
    bool use_a2v = true, use_v2a = true;
    std::set<int64_t> stg_blocks;
    std::optional<Perturbation> perturbation;  // used in stg_blocks only
};

TransformerState prepare(const TransformerConfig & c, Weights & w, const TransformerInputs & in);

// The step cache's hook on a submodule (taylorseer; Note [Step caching]): called with the module's diffusers name
// relative to its parent ("attn1", "ff" in a block; "proj_out" in finish) and the computation of its output; returns
// that output, computed or predicted. Empty: every module computes.
using ModuleHook = std::function<at::Tensor(const char * module, const std::function<at::Tensor()> & compute)>;

// Block i on state.x / state.a (updated in place). `hook`: each LTX2Attention (attn1, audio_attn1, attn2,
// audio_attn2, audio_to_video_attn, video_to_audio_attn) and FeedForward (ff, audio_ff) call goes through it.
void run_block(const TransformerConfig & c, Weights & w, int64_t i, TransformerState & state,
               const ModuleHook & hook = {});
// (video velocity [B, N_v, out_channels], audio velocity [B, N_a, audio_out_channels]). `hook`: proj_out and
// audio_proj_out go through it.
std::pair<at::Tensor, at::Tensor> finish(const TransformerConfig & c, Weights & w, const TransformerState & state,
                                         const ModuleHook & hook = {});

// The diffusers module names of LTX2VideoTransformer3DModel (named_modules(), the root "" included), and those the
// plugin routes through the step cache (taylorseer): each transformer_blocks.<i>, its six attentions and two
// feed-forwards, proj_out and audio_proj_out.
std::vector<std::string> diffusers_module_names(const TransformerConfig & c);
std::vector<std::string> hookable_module_names(const TransformerConfig & c);
// prepare, every block, finish. `cache` (borrowed; null: every block runs): the block loop goes through the step
// cache as one pass of branch `branch` at denoising step `step` (Note [Step caching]), the streams (video, audio) --
// the video's residual is the signal; a block it skips is told to the weights (Weights::skip).
std::pair<at::Tensor, at::Tensor> forward(const TransformerConfig & c, Weights & w, const TransformerInputs & in,
                                          model::StepCache * cache = nullptr, const std::string & branch = {},
                                          int step = 0);

}  // namespace ddo::ltx2
