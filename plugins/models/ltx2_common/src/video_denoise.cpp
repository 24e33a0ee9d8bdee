#include "video_denoise.hpp"

#include <cmath>
#include <string>

#include "ddo/error.hpp"

namespace ddo::ltx2 {

double ltx2_mu(const nlohmann::json & j, int64_t video_tokens) {
    // calculate_shift(latents.shape[1], config.get("base_image_seq_len", 1024), config.get("max_image_seq_len",
    // 4096), config.get("base_shift", 0.95), config.get("max_shift", 2.05)).
    auto get = [&](const char * k, double fallback) {
        const auto it = j.find(k);
        return it == j.end() || it->is_null() ? fallback : it->get<double>();
    };
    const double base_len = get("base_image_seq_len", 1024), max_len = get("max_image_seq_len", 4096);
    const double base_shift = get("base_shift", 0.95), max_shift = get("max_shift", 2.05);
    const double m = (max_shift - base_shift) / (max_len - base_len);
    const double b = base_shift - m * base_len;
    return double(video_tokens) * m + b;
}

model::FlowMatchSchedule ltx2_schedule(const model::FlowMatchConfig & c, const nlohmann::json & scheduler_json,
                                       std::vector<float> sigmas, int64_t video_tokens) {
    return model::make_schedule(c, std::move(sigmas), ltx2_mu(scheduler_json, video_tokens));
}

void require_finite_schedule(const model::FlowMatchSchedule & schedule, const std::string & model) {
    model::require_finite(schedule, model,
                          "the dynamic shift's exp(mu) overflows for this many latent tokens, or shift_terminal on a "
                          "grid that ends at sigma 1 (one step) divides by zero, as in the reference; use a smaller "
                          "size or more steps");
}

namespace {

// The per-step inputs every pass shares: the batch's timestep t [B'] (audio, sigma) and the video's (t, or per token
// t * (1 - mask) [B', N] with conditions), and the video coordinates when keyframe tokens are appended.
struct StepInputs {
    at::Tensor t, video_t;
    std::optional<at::Tensor> video_coords;
};

// One transformer pass with the pipeline's arguments.
std::pair<at::Tensor, at::Tensor> pass(const TransformerConfig & c, Weights & dit, const at::Tensor & video,
                                       const at::Tensor & audio, const at::Tensor & text_v, const at::Tensor & text_a,
                                       const at::Tensor & mask, const StepInputs & step, const LatentGeometry & g,
                                       const DenoiseSettings & s, bool isolate, bool stg, int step_index, float sigma) {
    TransformerInputs in;
    in.hidden_states = video.to(s.dtype);
    in.audio_hidden_states = audio.to(s.dtype);
    in.encoder_hidden_states = text_v;
    in.audio_encoder_hidden_states = text_a;
    in.timestep = step.video_t;
    in.audio_timestep = step.t;
    in.sigma = step.t;  // the pipeline passes sigma=timestep (LTX-2.3's prompt AdaLN)
    in.encoder_attention_mask = mask;
    in.audio_encoder_attention_mask = mask;
    in.num_frames = g.latent_frames;
    in.height = g.latent_height;
    in.width = g.latent_width;
    in.fps = s.fps;
    in.video_coords = step.video_coords;
    in.audio_num_frames = g.audio_frames;
    in.isolate_modalities = isolate;
    if (stg) in.spatio_temporal_guidance_blocks = s.stg_blocks;
    in.use_cross_timestep = s.use_cross_timestep;
    // LTX2Pipeline's cache_context names (pipeline_ltx2.py): one state per kind of pass.
    const char * branch = stg ? "uncond_stg" : isolate ? "uncond_modality" : "cond_uncond";
    // sea (Note [Step caching]): the gate reads the step's sigma (the scheduler's float32 value) and the video latents
    // the transformer receives, unpacked to (C, F, H, W) per sample as LTX2Pipeline._unpack_latents does (the [neg;
    // pos] batch: the same latents twice; image-to-video: the clean conditioned frame 0 included).
    if (s.step_cache && s.step_cache->settings().kind == model::StepCacheKind::sea) {
        if (in.hidden_states.size(1) != g.video_tokens())
            throw RuntimeError("ltx2: sea observes the latent grid's " + std::to_string(g.video_tokens()) +
                               " video tokens, the pass has " + std::to_string(in.hidden_states.size(1)) +
                               " (appended keyframe tokens are refused with a step cache); this is a bug");
        s.step_cache->observe(branch, double(sigma), unpack_video(in.hidden_states, g).unbind(0));
    }
    auto [v, a] = forward(c, dit, in, s.step_cache, branch, step_index);
    return {v.to(at::kFloat), a.to(at::kFloat)};
}

// The step's inputs for a batch of `rows` (B, or 2B with CFG, the conditions repeated as the pipelines repeat them).
StepInputs step_inputs(const TransformerConfig & c, float timestep, int64_t rows, const LatentGeometry & g,
                       const DenoiseSettings & s, const VideoConditioning * cond, const at::TensorOptions & f32) {
    StepInputs in;
    in.t = at::full({rows}, timestep, f32);  // t.expand(batch)
    in.video_t = in.t;
    if (!cond) return in;
    const int64_t reps = rows / cond->mask.size(0);
    in.video_t = in.t.unsqueeze(-1) * (1 - cond->mask.repeat({reps, 1}));
    if (cond->keyframe_coords) {
        const auto grid = video_coords(c, cond->mask.size(0), g.latent_frames, g.latent_height, g.latent_width, s.fps,
                                       cond->mask.device());
        in.video_coords = at::cat({grid, *cond->keyframe_coords}, 2).repeat({reps, 1, 1, 1});
    }
    return in;
}

// The video update with conditions: first_frame leaves latent frame 0 as it was; blend mixes the guided x0 with
// the clean latents by the mask before the velocity and the step.
at::Tensor conditioned_video_step(const at::Tensor & latents, const Predictions & pv, float sigma, float sigma_next,
                                  const GuidanceScales & scales, const GuidancePasses & passes,
                                  const VideoConditioning & cond) {
    if (cond.mode == ConditioningMode::first_frame) {
        auto next = model::euler_step(latents, guided_velocity(latents, pv, sigma, scales, passes), sigma, sigma_next);
        next.narrow(1, 0, cond.frame_tokens).copy_(latents.narrow(1, 0, cond.frame_tokens));
        return next;
    }
    const auto m = cond.mask.unsqueeze(-1);
    const auto x0 = guided_x0(latents, pv, sigma, scales, passes) * (1 - m) + cond.clean * m;
    return model::euler_step(latents, velocity_of(latents, x0, sigma), sigma, sigma_next);
}

// The schedule itself was checked before the first step (require_finite_schedule).
[[noreturn]] void throw_not_finite(int step, int total, float sigma) {
    throw RuntimeError("ltx2: the latents stopped being finite at denoising step " + std::to_string(step + 1) + " of " +
                       std::to_string(total) + " (sigma " + std::to_string(sigma) + "); in bf16/fp16 this is an "
                       "overflow (try workload.precision=fp32), otherwise a broken checkpoint");
}

}  // namespace

Denoised denoise(const TransformerConfig & c, Weights & dit, const ConnectorsOutput & text, const LatentGeometry & g,
                 Noise noise, const model::FlowMatchSchedule & schedule, const DenoiseSettings & s,
                 const DenoiseCallbacks & cb, const VideoConditioning * cond) {
    require_finite_schedule(schedule, "ltx2_video");
    const auto passes = guidance_passes(s.video, s.audio);
    auto latents = noise.video.to(at::kFloat);
    auto audio_latents = noise.audio.to(at::kFloat);
    const int64_t B = latents.size(0);
    const int total = int(schedule.timesteps.size());
    // The STG / isolation passes run on the positive half: the prompt's rows of the connectors' output.
    const auto half = [&](const at::Tensor & t) { return passes.cfg ? t.chunk(2, 0)[1] : t; };
    const auto pos_v = half(text.video), pos_a = half(text.audio), pos_mask = half(text.mask);
    const auto f32 = latents.options().dtype(at::kFloat);
    for (int i = 0; i < total; ++i) {
        if (cb.check_interrupted) cb.check_interrupted(i);
        const float sigma = schedule.sigmas[size_t(i)], sigma_next = schedule.sigmas[size_t(i) + 1];
        const float timestep = schedule.timesteps[size_t(i)];
        const auto step = step_inputs(c, timestep, passes.cfg ? 2 * B : B, g, s, cond, f32);
        Predictions pv, pa;
        if (passes.cfg) {
            auto [v, a] = pass(c, dit, at::cat({latents, latents}), at::cat({audio_latents, audio_latents}),
                               text.video, text.audio, text.mask, step, g, s, false, false, i, sigma);
            auto vc = v.chunk(2, 0), ac = a.chunk(2, 0);
            pv.uncond = vc[0];
            pv.cond = vc[1];
            pa.uncond = ac[0];
            pa.cond = ac[1];
        } else {
            std::tie(pv.cond, pa.cond) =
                pass(c, dit, latents, audio_latents, text.video, text.audio, text.mask, step, g, s, false, false, i,
                     sigma);
        }
        // The extra passes take the first half of the CFG batch's timesteps and coordinates (the pipelines' chunk).
        const auto step1 = passes.cfg ? step_inputs(c, timestep, B, g, s, cond, f32) : step;
        if (passes.stg) {
            auto [v, a] =
                pass(c, dit, latents, audio_latents, pos_v, pos_a, pos_mask, step1, g, s, false, true, i, sigma);
            pv.stg = v;
            pa.stg = a;
        }
        if (passes.isolate) {
            auto [v, a] =
                pass(c, dit, latents, audio_latents, pos_v, pos_a, pos_mask, step1, g, s, true, false, i, sigma);
            pv.isolated = v;
            pa.isolated = a;
        }
        latents = cond ? conditioned_video_step(latents, pv, sigma, sigma_next, s.video, passes, *cond)
                       : model::euler_step(latents, guided_velocity(latents, pv, sigma, s.video, passes), sigma,
                                           sigma_next);
        const auto v_audio = guided_velocity(audio_latents, pa, sigma, s.audio, passes);
        audio_latents = model::euler_step(audio_latents, v_audio, sigma, sigma_next);
        if (!at::isfinite(latents).all().item<bool>() || !at::isfinite(audio_latents).all().item<bool>())
            throw_not_finite(i, total, sigma);
        if (cb.on_step) cb.on_step(i + 1, total);
    }
    // LTX2ConditionPipeline drops the appended keyframe tokens after the last step.
    if (cond && latents.size(1) > cond->grid_tokens) latents = latents.narrow(1, 0, cond->grid_tokens).contiguous();
    return {latents, audio_latents};
}

}  // namespace ddo::ltx2
