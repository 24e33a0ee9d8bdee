// What each qwen_image_21 phase holds at its peak (Note [Memory forecast] in docs/architecture.md): the shapes,
// as the pipeline's code allocates them; the kit (ddo/model/memory_forecast.hpp) does the arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "ddo/model/memory_forecast.hpp"
#include "ddo/model/step_cache.hpp"
#include "pipeline.hpp"
#include "qwen3_text_model.hpp"
#include "vae_choice.hpp"

namespace ddo::qwen_image_21 {

struct MemoryInputs {
    std::int64_t batch = 1;          // images per prompt
    bool guide = false;              // classifier-free guidance: a second (uncond) pass per step
    std::int64_t prompt_tokens = 0;  // the prompt embeddings' length (a text prompt: an assumption, said in the term)
    bool prompt_tokens_known = true;
    std::int64_t reference_tokens = 0;  // latent tokens of the reference images (the joint sequence's prefix)
    bool kv_cache = false;           // the prefix K/V kept per layer from step 0
    bool kv_cache_on_host = false;
    VaeChoice vae;                   // the decode strategy decided up front
    at::ScalarType dtype = at::kFloat;
    const model::StepCache * step_cache = nullptr;  // cache.* (null: off): what it keeps per guidance branch
    // Phase "encode" (a text prompt without references): the tower's config, the longest template it runs on (the
    // prompt's or the negative prompt's, system turn included) and how many prompts it encodes, one after another.
    std::optional<text::Qwen3TextConfig> text_tower;
    std::int64_t tower_tokens = 0;
    int prompts = 1;
};

// Phases "encode" (with a text prompt and no reference: the weights of "text_encoder"), "denoise" (with the weights of
// "transformer") and "decode".
std::vector<model::StageMemory> stage_memory(const ModelFiles & m, const MemoryInputs & in, const model::ForecastShape & s);

}  // namespace ddo::qwen_image_21
