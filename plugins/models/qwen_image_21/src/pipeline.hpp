// The QwenImage21Pipeline from prompt embeddings: seeded noise in the reference's draw order -> flow-match Euler
// denoising (CFG as the reference: neg + s * (cond - neg), prefix KV cache switchable) -> de-normalise -> VAE
// decode -> RGBA pixels in [0, 1].
#pragma once

#include <filesystem>
#include <functional>
#include <optional>

#include <ATen/ATen.h>

#include "ddo/model/step_cache.hpp"

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
    // [B, L] bool: the references' <|image_pad|> slots in embeds / neg_embeds (none without references).
    std::optional<at::Tensor> image_pad_mask;
    std::optional<at::Tensor> neg_image_pad_mask;
};

// The references' latents as the transformer reads them before the target's: each reference's normalised VAE
// latents packed [1, h*w, C], concatenated in order, with its (1, h, w) shape.
struct ReferenceLatents {
    at::Tensor packed;                // [1, N_ref, C]
    std::vector<ImageShape> shapes;
};
// Keys: prompt_embeds, prompt_embeds_mask (optional), negative_prompt_embeds(+_mask) (optional).
PromptEmbeds load_prompt_embeds(const std::filesystem::path & path, int64_t context_in_dim);
// num_images_per_prompt as QwenImage21Pipeline.encode_prompt: each prompt's rows repeated n times, interleaved
// (embeds repeat(1, n, 1), masks repeat(1, n), both viewed as [B * n, L, ...]).
PromptEmbeds repeat_per_prompt(const PromptEmbeds & e, int64_t n);

struct PipelineOptions {
    int64_t width = 1024, height = 1024;
    int steps = 40;                     // the default grid's size when `sigmas` is empty
    std::vector<float> sigmas;          // the sampling grid (excluding the terminal); empty: default_sigmas(steps)
    std::optional<at::Tensor> latents;  // initial packed latents [B, h*w, C] (the pipeline's latents=); none: seeded noise
    uint64_t seed = 0;
    double true_cfg_scale = 1.0;
    bool use_kv_cache = true;
    // Where the prefix KV cache lives between steps: on the compute device, or in host memory (pinned when asked)
    // and copied to the device layer by layer, like streamed weights. Note [Qwen-Image 2.1 prefix cache].
    bool kv_cache_on_host = false;
    bool kv_cache_pinned = false;
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
    // cache.* (ModelRun::step_cache): the block loop of each pass goes through it, per guidance branch ("cond",
    // "uncond", as the pipeline's cache_context names them). Borrowed; null: every block of every step.
    model::StepCache * step_cache = nullptr;
};

struct PipelineCallbacks {
    std::function<void(int step, int total)> on_step;  // after each denoising step
    std::function<void(int step)> check_interrupted;   // before each step: throws to stop the run
};

// What the prefix KV cache held and how often it was read (the report's counters.transformer.kv_cache).
struct KvCacheStats {
    std::uint64_t bytes = 0;         // K + V of every layer, both caches when guiding
    std::int64_t prefix_tokens = 0;  // text + reference tokens of the (positive) prefix
    std::int64_t extracts = 0;       // block runs that wrote a layer's cache (step 0)
    std::int64_t hits = 0;           // block runs that read a layer's cache instead of recomputing the prefix
    std::uint64_t bytes_to_device = 0;  // host-placed cache: bytes copied to the device for the blocks
};

struct ModelFiles {
    TransformerConfig transformer_config;
    VaeConfig vae_config;
    SchedulerConfig scheduler_config;
    TensorFile transformer;
    TensorFile vae;
    // model_index.json sample_sigmas: the model author's default grid (excluding the terminal sigma); the pipeline
    // uses it unless the call passes sigmas=. None when absent or null.
    std::optional<std::vector<double>> sample_sigmas;
    // transformer: <model_dir>/transformer, or a file replacing its weights (--transformer FILE).
    static ModelFiles open(const std::filesystem::path & model_dir, const store::ComponentSource & transformer);
    static ModelFiles open(const std::filesystem::path & model_dir) { return open(model_dir, model_dir / "transformer"); }
};

// The initial latents from a file (--latents): tensor "latents", packed [B, h*w, C] as the pipeline's latents= or
// the noise's own shape [B, 1, C, h, w]. UsageError naming the file and the shape expected.
at::Tensor load_initial_latents(const std::filesystem::path & path, int64_t batch, int64_t channels, int64_t width,
                                int64_t height);

// Packed latents [B, h*w, C] after denoising. blocks supplies each block's weights. RuntimeError naming the step
// when the latents stop being finite (and the likely cause).
// refs: the condition images' latents (QwenImage21Pipeline's image=), null for none.
at::Tensor denoise(const ModelFiles & m, const Transformer & transformer, BlockSource & blocks,
                   const PromptEmbeds & embeds, const PipelineOptions & o, const PipelineCallbacks & cb = {},
                   const ReferenceLatents * refs = nullptr, KvCacheStats * kv_stats = nullptr);
// De-normalise + decode: [B, 4, H, W] in [0, 1].
at::Tensor decode_latents(const ModelFiles & m, const VaeDecoder & vae, const at::Tensor & latents,
                          const PipelineOptions & o);

}  // namespace ddo::qwen_image_21
