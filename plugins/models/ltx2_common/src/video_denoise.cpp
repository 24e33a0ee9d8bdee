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

// One transformer pass with the pipeline's arguments.
std::pair<at::Tensor, at::Tensor> pass(const TransformerConfig & c, Weights & dit, const at::Tensor & video,
                                       const at::Tensor & audio, const at::Tensor & text_v, const at::Tensor & text_a,
                                       const at::Tensor & mask, const at::Tensor & timestep, const LatentGeometry & g,
                                       const DenoiseSettings & s, bool isolate, bool stg) {
    TransformerInputs in;
    in.hidden_states = video.to(s.dtype);
    in.audio_hidden_states = audio.to(s.dtype);
    in.encoder_hidden_states = text_v;
    in.audio_encoder_hidden_states = text_a;
    in.timestep = timestep;
    in.sigma = timestep;  // the pipeline passes sigma=timestep (LTX-2.3's prompt AdaLN)
    in.encoder_attention_mask = mask;
    in.audio_encoder_attention_mask = mask;
    in.num_frames = g.latent_frames;
    in.height = g.latent_height;
    in.width = g.latent_width;
    in.fps = s.fps;
    in.audio_num_frames = g.audio_frames;
    in.isolate_modalities = isolate;
    if (stg) in.spatio_temporal_guidance_blocks = s.stg_blocks;
    in.use_cross_timestep = s.use_cross_timestep;
    auto [v, a] = forward(c, dit, in);
    return {v.to(at::kFloat), a.to(at::kFloat)};
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
                 const DenoiseCallbacks & cb) {
    require_finite_schedule(schedule, "ltx2_video");
    const auto passes = guidance_passes(s.video, s.audio);
    auto latents = noise.video.to(at::kFloat);
    auto audio_latents = noise.audio.to(at::kFloat);
    const int64_t B = latents.size(0);
    const int total = int(schedule.timesteps.size());
    // The STG / isolation passes run on the positive half: the prompt's rows of the connectors' output.
    const auto half = [&](const at::Tensor & t) { return passes.cfg ? t.chunk(2, 0)[1] : t; };
    const auto pos_v = half(text.video), pos_a = half(text.audio), pos_mask = half(text.mask);
    for (int i = 0; i < total; ++i) {
        if (cb.check_interrupted) cb.check_interrupted(i);
        const float sigma = schedule.sigmas[size_t(i)], sigma_next = schedule.sigmas[size_t(i) + 1];
        const auto f32 = latents.options().dtype(at::kFloat);
        const auto t = at::full({passes.cfg ? 2 * B : B}, schedule.timesteps[size_t(i)], f32);  // t.expand(batch)
        Predictions pv, pa;
        if (passes.cfg) {
            auto [v, a] = pass(c, dit, at::cat({latents, latents}), at::cat({audio_latents, audio_latents}),
                               text.video, text.audio, text.mask, t, g, s, false, false);
            auto vc = v.chunk(2, 0), ac = a.chunk(2, 0);
            pv.uncond = vc[0];
            pv.cond = vc[1];
            pa.uncond = ac[0];
            pa.cond = ac[1];
        } else {
            std::tie(pv.cond, pa.cond) =
                pass(c, dit, latents, audio_latents, text.video, text.audio, text.mask, t, g, s, false, false);
        }
        const auto t1 = passes.cfg ? t.chunk(2, 0)[0] : t;
        if (passes.stg) {
            auto [v, a] = pass(c, dit, latents, audio_latents, pos_v, pos_a, pos_mask, t1, g, s, false, true);
            pv.stg = v;
            pa.stg = a;
        }
        if (passes.isolate) {
            auto [v, a] = pass(c, dit, latents, audio_latents, pos_v, pos_a, pos_mask, t1, g, s, true, false);
            pv.isolated = v;
            pa.isolated = a;
        }
        const auto v_video = guided_velocity(latents, pv, sigma, s.video, passes);
        const auto v_audio = guided_velocity(audio_latents, pa, sigma, s.audio, passes);
        latents = model::euler_step(latents, v_video, sigma, sigma_next);
        audio_latents = model::euler_step(audio_latents, v_audio, sigma, sigma_next);
        if (!at::isfinite(latents).all().item<bool>() || !at::isfinite(audio_latents).all().item<bool>())
            throw_not_finite(i, total, sigma);
        if (cb.on_step) cb.on_step(i + 1, total);
    }
    return {latents, audio_latents};
}

}  // namespace ddo::ltx2
