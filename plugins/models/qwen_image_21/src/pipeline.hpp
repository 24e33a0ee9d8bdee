// The QwenImage21Pipeline from prompt embeddings: seeded noise in the reference's draw order -> flow-match Euler
// denoising (CFG as the reference: neg + s * (cond - neg), prefix KV cache switchable) -> de-normalise -> VAE
// decode -> RGBA pixels in [0, 1].
#pragma once

#include <filesystem>
#include <functional>
#include <optional>

#include <ATen/ATen.h>

#include "block_source.hpp"
#include "checkpoint.hpp"
#include "config.hpp"
#include "scheduler.hpp"
#include "transformer.hpp"
#include "vae_decoder.hpp"

namespace ddo::qwen_image_21 {

struct PromptEmbeds {
    at::Tensor embeds;                       // [B, L, context_in_dim]
    std::optional<at::Tensor> mask;          // [B, L] bool
    std::optional<at::Tensor> neg_embeds;    // for classifier-free guidance
    std::optional<at::Tensor> neg_mask;
};
// Keys: prompt_embeds, prompt_embeds_mask (optional), negative_prompt_embeds(+_mask) (optional).
PromptEmbeds load_prompt_embeds(const std::filesystem::path & path, int64_t context_in_dim);
// num_images_per_prompt as QwenImage21Pipeline.encode_prompt: each prompt's rows repeated n times, interleaved
// (embeds repeat(1, n, 1), masks repeat(1, n), both viewed as [B * n, L, ...]).
PromptEmbeds repeat_per_prompt(const PromptEmbeds & e, int64_t n);

struct PipelineOptions {
    int64_t width = 1024, height = 1024;
    int steps = 40;
    uint64_t seed = 0;
    double true_cfg_scale = 1.0;
    bool use_kv_cache = true;
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
};

struct PipelineCallbacks {
    std::function<void(int step, int total)> on_step;  // after each denoising step
    std::function<void(int step)> check_interrupted;   // before each step: throws to stop the run
};

struct ModelFiles {
    TransformerConfig transformer_config;
    VaeConfig vae_config;
    SchedulerConfig scheduler_config;
    TensorFile transformer;
    TensorFile vae;
    static ModelFiles open(const std::filesystem::path & model_dir);
};

// Packed latents [B, h*w, C] after denoising. blocks supplies each block's weights.
at::Tensor denoise(const ModelFiles & m, const Transformer & transformer, BlockSource & blocks,
                   const PromptEmbeds & embeds, const PipelineOptions & o, const PipelineCallbacks & cb = {});
// De-normalise + decode: [B, 4, H, W] in [0, 1].
at::Tensor decode_latents(const ModelFiles & m, const VaeDecoder & vae, const at::Tensor & latents,
                          const PipelineOptions & o);

}  // namespace ddo::qwen_image_21
