// The LTX2Pipeline denoising loop (models.md §5.12 steps 4-6; diffusers pipeline_ltx2.py __call__): the sampling
// schedule (one flow-match schedule shared by video and audio, mu from the video token count), per step the
// transformer passes the guidance needs (the conditional/unconditional batch, STG, modality isolation), guidance in
// x0 space, and one Euler step per modality. The DiT's weights come from a Weights source (resident or the engine);
// each pass runs prepare -> every block -> finish, so on the engine the blocks stream once per pass.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "connectors.hpp"
#include "ddo/model/flow_match.hpp"
#include "guidance.hpp"
#include "latents.hpp"
#include "transformer.hpp"
#include "video_conditions.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// mu = calculate_shift(video tokens, base_image_seq_len, max_image_seq_len, base_shift, max_shift) read from
// scheduler_config.json as LTX2Pipeline reads them: .get(key, 1024 | 4096 | 0.95 | 2.05) for a missing key (where
// FlowMatchConfig would take the scheduler class's defaults).
double ltx2_mu(const nlohmann::json & scheduler_config, int64_t video_tokens);
// The pipeline's sigmas (workload.sigmas, the call's sigmas=, or linspace(1, 1/steps, steps)) through set_timesteps
// with that mu. A schedule that is not finite (exp(mu) overflows for a huge latent grid; shift_terminal with one
// step divides by zero, as in the reference) is computed as the reference computes it (a dry run and the report
// show it); denoise and image_denoise refuse it before the first step (require_finite_schedule).
model::FlowMatchSchedule ltx2_schedule(const model::FlowMatchConfig & c, const nlohmann::json & scheduler_json,
                                       std::vector<float> sigmas, int64_t video_tokens);
// model::require_finite with LTX-2's causes and fixes: UsageError (exit 2) "<model>: the sigma schedule is not
// finite ..." (Note [A non-finite schedule is refused before the first step] in docs/architecture.md).
void require_finite_schedule(const model::FlowMatchSchedule & schedule, const std::string & model);

struct DenoiseSettings {
    GuidanceScales video, audio;
    std::vector<int64_t> stg_blocks;   // spatio_temporal_guidance_blocks
    bool use_cross_timestep = true;
    double fps = 24.0;                 // the conditioning frame rate (frame_rate / motion_speed; motion_speed 1)
    at::ScalarType dtype = at::kFloat; // the text/transformer dtype (latent_model_input.to(prompt_embeds.dtype))
    // cache.* (ModelRun::step_cache; Note [Step caching]): each pass goes through it under the pipelines'
    // cache_context names: "cond_uncond" (the guidance batch, one forward), "uncond_stg", "uncond_modality"; sea
    // observes each pass's sigma and video latents (C, F, H, W) per sample first.
    // Borrowed; null: every block of every pass.
    model::StepCache * step_cache = nullptr;
};

struct DenoiseCallbacks {
    std::function<void(int step)> check_interrupted;  // before each step: throws to stop
    std::function<void(int step, int total)> on_step; // after each step
};

struct Denoised {
    at::Tensor video;  // packed [B, N_v, C], float32
    at::Tensor audio;  // packed [B, L, C*M], float32
};

// text: the connectors' output for [negative; positive] when CFG runs (batch 2B), else for the prompt (B).
// conditioning (video_conditions.hpp): the image conditions of the start latents; the video timestep becomes per
// token, frame 0 stays out of the update (first_frame) or the guided x0 is blended with the clean latents (blend,
// whose appended keyframe tokens are dropped from the result). Throws RuntimeError naming the step when the latents
// stop being finite.
Denoised denoise(const TransformerConfig & c, Weights & dit, const ConnectorsOutput & text, const LatentGeometry & g,
                 Noise noise, const model::FlowMatchSchedule & schedule, const DenoiseSettings & s,
                 const DenoiseCallbacks & cb = {}, const VideoConditioning * conditioning = nullptr);

}  // namespace ddo::ltx2
