// LTX2ImageTransformer2DModel (the LTX-2.3 image-only DiT, models.md §6) in ATen, split for the engine like the
// video DiT (transformer.hpp): prepare() (additive text mask, the video RoPE of one frame at 24 fps, proj_in, the
// 9-param AdaLN-single and the prompt AdaLN fed the timestep) in scope "globals"; run_block() applies block i in
// scope "transformer_blocks.<i>" (steps 1, 3, 4, 7 of LTX2VideoTransformerBlock: self-attention with PAG through
// the perturbed-attention processor, prompt K/V modulation, text cross-attention with (shift, scale, gate)_q,
// feed-forward); finish() the output norm and projection. Key names are the LTX-2.3 video keys minus audio.
// Reference: the composition of diffusers 0.42.1's LTX-2 modules in tools/reference/ltx2_image_fixtures.py,
// equal to DEVAIEXP/ltx2-image-diffusers custom_blocks/ltx2_image/transformer_ltx2_image.py on shared weights.
// The attention, RoPE and AdaLN math is the video DiT's (attention.hpp, rope.hpp, transformer.hpp adaln_single).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/model/tensor_file.hpp"

#include "attention.hpp"
#include "rope.hpp"
#include "transformer.hpp"
#include "transformer_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// transformer/config.json of LTX2ImageTransformer2DModel read into the video DiT's config (the video fields; the
// audio fields keep defaults nothing reads). The image model's defaults differ: cross_attn_mod true, no caption
// projection, attn1 always perturbable (PAG). Throws UsageError naming file and key (cross_attention_dim must be
// the inner width: the prompt tables modulate the text).
TransformerConfig image_transformer_config(const nlohmann::json & j, const std::filesystem::path & file);
TransformerConfig image_transformer_config_from_file(const std::filesystem::path & config_json);

// (name, shape) of every tensor, globals first, then block 0, 1, ...; the block's alone.
TensorSpecs image_transformer_specs(const TransformerConfig & c);
TensorSpecs image_block_specs(const TransformerConfig & c, int64_t i);
// Exactly the implied tensors (shapes, floating dtypes); RuntimeError naming tensor and file (`f` borrowed).
void validate_image_transformer(const model::TensorFile & f, const TransformerConfig & c);
// "globals", then "transformer_blocks.<i>".
std::vector<model::GroupSpec> image_transformer_groups(const TransformerConfig & c);

// LTX2ImageTransformer2DModel.forward's arguments.
struct ImageTransformerInputs {
    at::Tensor hidden_states;                    // [B, h*w, in_channels]
    at::Tensor encoder_hidden_states;            // [B, L, cross_attention_dim] (the connectors' output)
    at::Tensor timestep;                         // [B], sigma * 1000 (also the prompt AdaLN's input)
    std::optional<at::Tensor> encoder_attention_mask;  // [B, L] binary
    int64_t height = 0, width = 0;               // latent grid
    std::vector<int64_t> pag_blocks;             // pag_applied_layers
    std::optional<at::Tensor> perturbation_mask; // [B]: 0 = perturbed sample (value passthrough in pag_blocks)
};

// What a block reads besides its weights. Owned tensors.
struct ImageTransformerState {
    at::Tensor x;                             // [B, N, D]
    at::Tensor text;                          // [B, L, D]
    std::optional<at::Tensor> text_mask;      // additive [B, 1, L]
    at::Tensor temb, embedded_timestep;       // [B, 1, n*D], [B, 1, D]
    std::optional<at::Tensor> temb_prompt;    // [B, 1, 2*D]
    RopeTables rope;
    std::set<int64_t> pag_blocks;
    std::optional<Perturbation> perturbation;
};

ImageTransformerState image_prepare(const TransformerConfig & c, Weights & w, const ImageTransformerInputs & in);
// `hook` (taylorseer): the block's attn1, attn2 and ff calls go through it (ModuleHook, transformer.hpp).
void image_run_block(const TransformerConfig & c, Weights & w, int64_t i, ImageTransformerState & state,
                     const ModuleHook & hook = {});
// Velocity [B, N, out_channels]. `hook`: proj_out goes through it.
at::Tensor image_finish(const TransformerConfig & c, Weights & w, const ImageTransformerState & state,
                        const ModuleHook & hook = {});
// The module names of the image DiT as the cache fixtures' reference class has them (named_modules() of
// tools/reference/ltx2_image_fixtures.py OriginalTransformer, the original LTX2ImageTransformer2DModel; the root ""
// included), and those the plugin routes through the step cache (taylorseer): each transformer_blocks.<i>, its attn1,
// attn2 and ff, and proj_out.
std::vector<std::string> image_diffusers_module_names(const TransformerConfig & c);
std::vector<std::string> image_hookable_module_names(const TransformerConfig & c);
// `cache` (borrowed; null: every block runs): the block loop goes through the step cache as one pass of branch
// `branch` at denoising step `step` (Note [Step caching]); a block it skips is told to the weights (Weights::skip).
at::Tensor image_forward(const TransformerConfig & c, Weights & w, const ImageTransformerInputs & in,
                         model::StepCache * cache = nullptr, const std::string & branch = {}, int step = 0);

}  // namespace ddo::ltx2
