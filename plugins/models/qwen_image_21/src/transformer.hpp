// QwenImage21Transformer2DModel in LibTorch (models.md §4; diffusers transformer_qwenimage21.py is the reference).
// The forward is split so that each block can run as one engine execution group: prepare() builds the joint
// sequence, RoPE table, modulation and attention structure; run_block() applies one block with weights the
// caller supplies (resident, streamed or read from disk); finish() applies the output norm and projection.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/linear.hpp"
#include "ddo/model/lora_adapters.hpp"

#include "checkpoint.hpp"
#include "config.hpp"

namespace ddo::qwen_image_21 {

using ImageShape = std::array<int64_t, 3>;  // (frame, height, width) in latent tokens

// Linear modules as model::Linear: their weight and the LoRA adapting them, if any (Note [Applying LoRA]).
struct TransformerGlobals {
    model::Linear img_in;
    at::Tensor txt_norm;
    model::Linear txt_in_layer, txt_out_layer, time_linear_1, time_linear_2, modulation, norm_out, proj_out;
};

struct TransformerBlockWeights {
    model::Linear to_q, to_k, to_v, to_out;
    at::Tensor norm_q, norm_k;
    model::Linear mlp_proj, mlp_gate, mlp_out;
};

// Looks up the LoRA factors of a weight tensor ("<module>.weight"); empty or null: none.
using LoraLookup = std::function<const model::LoraDelta *(const std::string & weight)>;

// (name, shape) of every tensor, in checkpoint naming. Block tensors carry the "transformer_blocks.<i>." prefix.
std::vector<std::pair<std::string, std::vector<int64_t>>> global_tensor_specs(const TransformerConfig & c);
std::vector<std::pair<std::string, std::vector<int64_t>>> block_tensor_specs(const TransformerConfig & c, int64_t i);
// Checks that the checkpoint holds exactly the tensors the config implies (names, shapes, floating dtypes).
void validate_transformer_checkpoint(const TensorFile & f, const TransformerConfig & c);
// The globals on `device` (the run's compute device: they run beside the blocks). lora: the transformer's LoRA factors
// (ModelRun::lora), null for none; each module's factors are attached to its weight (ComponentLora::attach).
TransformerGlobals load_transformer_globals(const TensorFile & f, const TransformerConfig & c, at::ScalarType dtype,
                                            model::ComponentLora * lora = nullptr, c10::Device device = at::kCPU);
TransformerBlockWeights load_transformer_block(const TensorFile & f, const TransformerConfig & c, int64_t i,
                                               at::ScalarType dtype);
// Builds block weights from tensors named as in block_tensor_specs (e.g. leased from the engine).
TransformerBlockWeights block_weights_from(const std::function<at::Tensor(const std::string &)> & get,
                                           const TransformerConfig & c, int64_t i, const LoraLookup & lora = {});

// 3-axis RoPE table (complex64 [S, head_dim/2]) with the 2.1 position rules (QwenImage21Rope.forward).
at::Tensor rope_table(const TransformerConfig & c, const std::vector<ImageShape> & img_shapes,
                      const at::Tensor & image_pad_mask);

enum class KvMode { off, extract, cached };

struct KvLayerCache {
    at::Tensor k, v;  // [B, prefix, H, Dh], post-norm, post-RoPE
};

struct Segment {
    int64_t start, end;
    bool is_text;
};

struct TransformerInputs {
    at::Tensor hidden_states;          // [B, N_img, C]: condition images first, target last
    at::Tensor encoder_hidden_states;  // [B, L, context_in_dim]
    at::Tensor timestep;               // [B], in [0, 1]
    std::vector<ImageShape> img_shapes;
    at::Tensor img_mask;                    // [B, L + target/4] bool: VLM image slots (+ appended target slots)
    std::optional<at::Tensor> text_mask;    // [B, L] bool: valid text tokens (padded keys masked)
};

// What every block needs besides its weights.
struct BlockContext {
    at::Tensor modulation;                 // [B(+1), 4D]
    at::Tensor rotary;                     // complex [S_q, Dh/2]
    std::optional<at::Tensor> mod_mask;    // [S_q] bool: target tokens (causal_condition)
    std::optional<at::Tensor> key_valid;   // [B, S_kv] bool
    std::vector<Segment> segments;         // prefill structure (empty in cached mode)
    int64_t prefix_len = 0;
    KvMode kv_mode = KvMode::off;
};

struct TransformerState {
    at::Tensor x;     // [B, S_q, D]
    at::Tensor temb;  // [B(+1), D]
    BlockContext ctx;
};

class Transformer {
public:
    Transformer(TransformerConfig config, TransformerGlobals globals);
    const TransformerConfig & config() const { return config_; }
    TransformerState prepare(const TransformerInputs & in, KvMode mode) const;
    // [B, S_q, out_channels]. proj_out_hook: the step cache's hook for module "proj_out" (taylorseer), empty: none.
    at::Tensor finish(const TransformerState & s, const std::function<at::Tensor(const std::function<at::Tensor()> &)> &
                                                      proj_out_hook = {}) const;

    // Convenience: prepare, every block through `block`, finish.
    using BlockFn = std::function<at::Tensor(int64_t index, const at::Tensor & x, const BlockContext & ctx)>;
    at::Tensor forward(const TransformerInputs & in, KvMode mode, const BlockFn & block) const;

private:
    TransformerConfig config_;
    TransformerGlobals g_;
};

// The step cache's hook on a block's submodule (taylorseer; Note [Step caching]): called with the diffusers name
// below the block ("attn", "img_mlp") and the computation of that module's output; returns it, computed or predicted.
using ModuleHook = std::function<at::Tensor(const char * module, const std::function<at::Tensor()> & compute)>;

// One QwenImage21TransformerBlock. cache: read (cached) or written (extract) when kv_mode says so.
at::Tensor run_block(const TransformerConfig & c, const TransformerBlockWeights & w, const at::Tensor & x,
                     const BlockContext & ctx, KvLayerCache * cache, const ModuleHook & hook = {});

// The diffusers module names of QwenImage21Transformer2DModel (named_modules(), the root "" included), and those the
// plugin routes through the step cache: each block, its attn and img_mlp, and proj_out.
std::vector<std::string> diffusers_module_names(const TransformerConfig & c);
std::vector<std::string> hookable_module_names(const TransformerConfig & c);

}  // namespace ddo::qwen_image_21
