// What the LTX-2 video run's denoise and decode phases hold at their peak (Note [Memory forecast] in
// docs/architecture.md): the shapes as the transformer and the pipeline allocate them; the kit
// (ddo/model/memory_forecast.hpp) does the arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "ddo/model/memory_forecast.hpp"
#include "ddo/model/step_cache.hpp"
#include "connectors.hpp"
#include "latents.hpp"
#include "video_model.hpp"
#include "video_vae_choice.hpp"

namespace ddo::ltx2 {

struct VideoMemoryInputs {
    bool cfg = false;                // the [neg; pos] batch of classifier-free guidance
    int extra_passes = 0;            // batch-1 passes besides it per step (STG, modality isolation)
    std::int64_t text_tokens = 1024; // the connectors' sequence length (max_sequence_length, or the embeddings file's)
    // The prompt's hidden states come from a file (--prompt-embeds): phase "encode" runs the connectors alone, in
    // `embeds_dtype` as read. Otherwise Gemma-3 runs in it too, which no model states yet: the phase is left out.
    bool embeds_given = false;
    at::ScalarType embeds_dtype = at::kFloat;
    bool per_token_timesteps = false;  // conditioned frames (image-to-video, keyframes): a timestep per video token
    std::int64_t keyframes = 0;      // LTX2ConditionPipeline's appended keyframes (a latent frame of tokens each)
    double fps = 24;
    bool two_stage = false;          // phase denoise_stage2 at the full size (stage 1 at half)
    bool stage2_cfg = false;
    int stage2_extra_passes = 0;
    VideoVaeChoice vae;
    at::ScalarType dtype = at::kFloat;
    bool cuda = false;
    const model::StepCache * step_cache = nullptr;  // cache.* (null: off): what it keeps per pass (branch)
};

// Phase "encode" of the text connectors on given prompt hidden states (connectors_forward, and with `audio` false
// image_connectors_forward), in parts, one after another, each beside the connectors' weights and the inputs: the
// normalisation of the stacked hidden states [B, L, C x F] (LTX-2.3's per-modality RMS norm: the normalised states,
// zeros_like and the masked result; LTX-2.0's masked mean norm: the masked copy and the scaling's temporaries), then
// each connector on its projection (the learnable registers' gather and select, a block's feed-forward: its input,
// norm, the 4 D projection and its GELU, then the final norm), the video connector's output kept while the audio one
// runs.
struct ConnectorEncode {
    std::int64_t batch = 1, tokens = 1024;  // the connectors' batch (guidance rows) and sequence length
    int prompts = 1;                        // stacked hidden states held as read (the prompt, the negative prompt)
    bool batch_copy = false;                // the batch is their concatenation (a copy)
    at::ScalarType embeds_dtype = at::kFloat, dtype = at::kFloat;
    bool audio = true;                      // the audio connector too (LTX2TextConnectors)
};
void connector_encode_stages(std::vector<model::StageMemory> & out, const ConnectorsConfig & c, const ConnectorEncode & e);

// Phases "encode" (the connectors, when the prompt's hidden states were given: connector_encode_stages), "denoise"
// (stage 1: half size in a two-stage run), "denoise_stage2" (two-stage), "decode_audio" (in two parts: the audio VAE,
// then the vocoder) and "decode" (the video VAE), with the weights of "connectors", "transformer", "audio_vae",
// "vocoder" and "vae".
std::vector<model::StageMemory> video_stage_memory(const VideoModel & m, const VideoMemoryInputs & in,
                                                   const model::ForecastShape & s);

}  // namespace ddo::ltx2
