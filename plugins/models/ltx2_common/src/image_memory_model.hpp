// What the LTX-2 image run's denoise and decode phases hold at their peak (Note [Memory forecast] in
// docs/architecture.md): the video stream of the DiT on one frame, the guidance batch in one pass.
#pragma once

#include <cstdint>
#include <vector>

#include "ddo/model/memory_forecast.hpp"
#include "ddo/model/step_cache.hpp"
#include "image_pipeline.hpp"
#include "video_vae_choice.hpp"

namespace ddo::ltx2 {

struct ImageMemoryInputs {
    std::int64_t batch = 1;           // the guidance batch: [pos], [neg; pos], [neg; pos; pos] (PAG) or [pos; pos]
    std::int64_t text_tokens = 1024;  // the connectors' sequence length
    // The prompt's hidden states come from a file (--prompt-embeds): phase "encode" runs the connectors alone, on
    // `prompts` stacked hidden states as read (the prompt, the negative prompt) in `embeds_dtype`. Otherwise Gemma-3
    // runs in it too, which no model states yet: the phase is left out.
    bool embeds_given = false;
    int prompts = 1;
    at::ScalarType embeds_dtype = at::kFloat;
    VideoVaeChoice vae;
    at::ScalarType dtype = at::kFloat;
    bool cuda = false;
    const model::StepCache * step_cache = nullptr;  // cache.* (null: off): what it keeps for the guidance batch's pass
};

// Phases "encode" (the connectors, in parts: connector_encode_stages), "denoise" (with the weights of "transformer")
// and "decode" (with those of "vae").
std::vector<model::StageMemory> image_stage_memory(const ImageModel & m, const ImageMemoryInputs & in,
                                                   const model::ForecastShape & s);

}  // namespace ddo::ltx2
