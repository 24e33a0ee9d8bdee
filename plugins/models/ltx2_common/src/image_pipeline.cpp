// The LTX-2 image pipeline (reference: compose_image in tools/reference/ltx2_image_fixtures.py, following
// modular_blocks_ltx2_image.py LTX2ImagePrepareLatentsStep / LTX2ImageDenoiseStep / LTX2ImageDecodeStep; img2img:
// tools/reference/ltx2_image_img2img_fixtures.py, following get_strength_sigmas / LTX2ImageVaeEncoderStep and the
// img2img branch of LTX2ImagePrepareLatentsStep).
#include "image_pipeline.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include <cmath>
#include <string>

#include "ddo/error.hpp"
#include "guidance.hpp"
#include "video_denoise.hpp"
#include "video_vae_decoder.hpp"

namespace ddo::ltx2 {
namespace {

[[noreturn]] void contradiction(const std::filesystem::path & file, const std::string & what) {
    throw RuntimeError(file.string() + ": " + what +
                       "; the components come from different checkpoints: re-export the model with diffusers "
                       "save_pretrained");
}

}  // namespace

ImageModel ImageModel::open(const std::filesystem::path & dir, const store::ComponentSource & transformer) {
    ImageModel m;
    m.dir = dir;
    m.transformer_config = image_transformer_config_from_file(dir / "transformer" / "config.json");
    m.connectors_config = image_connectors_config_from_file(dir / "connectors" / "config.json");
    m.vae_config = VideoVaeConfig::load(dir / "vae");
    const auto sched = dir / "scheduler" / "scheduler_config.json";
    m.scheduler_json = read_config_json(sched);
    m.scheduler_config = model::FlowMatchConfig::from_json(m.scheduler_json, sched);
    m.transformer = model::TensorFile::open_component(transformer);
    m.connectors = model::TensorFile::open_component(dir / "connectors");
    m.vae = model::TensorFile::open_component(dir / "vae");
    validate_image_transformer(m.transformer, m.transformer_config);
    validate_image_connectors(m.connectors, m.connectors_config);
    validate_video_vae_checkpoint(m.vae, m.vae_config);

    const auto & t = m.transformer_config;
    if (m.connectors_config.video.inner_dim() != t.cross_attention_dim)
        contradiction(dir / "connectors" / "config.json",
                      "the connectors produce text of width " + std::to_string(m.connectors_config.video.inner_dim()) +
                          " but the transformer's cross_attention_dim is " + std::to_string(t.cross_attention_dim));
    if (m.vae_config.latent_channels != t.in_channels)
        contradiction(dir / "vae" / "config.json", "latent_channels " + std::to_string(m.vae_config.latent_channels) +
                                                       " but the transformer's in_channels is " +
                                                       std::to_string(t.in_channels));
    return m;
}

ImageGeometry image_geometry(const VideoVaeConfig & vae, int64_t height, int64_t width) {
    const int64_t s = vae.spatial_compression_ratio;
    return {height, width, height / s, width / s};
}

at::Tensor draw_image_noise(int64_t channels, const ImageGeometry & g, int64_t batch, uint64_t seed, at::Device device) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto z = at::randn({batch, channels, 1, g.latent_height, g.latent_width}, gen, at::TensorOptions().dtype(at::kFloat));
    return z.permute({0, 2, 3, 4, 1}).flatten(1, 3).contiguous().to(device);
}

std::pair<at::Tensor, at::Tensor> image_text_batch(const ImageGuidance & g, const at::Tensor & embeds,
                                                   const at::Tensor & mask, const at::Tensor & neg_embeds,
                                                   const at::Tensor & neg_mask) {
    std::vector<at::Tensor> e{embeds}, m{mask};
    if (g.cfg > 1.0) {
        e = {neg_embeds, embeds};
        m = {neg_mask, mask};
    }
    if (g.pag > 0.0) {
        e.push_back(embeds);
        m.push_back(mask);
    }
    return {at::cat(e), at::cat(m)};
}

at::Tensor image_denoise(const TransformerConfig & c, Weights & dit, const ImageText & text, const ImageGeometry & g,
                         at::Tensor noise, const model::FlowMatchSchedule & schedule, const ImageDenoiseSettings & s) {
    const bool cfg = s.guidance.cfg > 1.0, pag = s.guidance.pag > 0.0;
    const int64_t mult = 1 + int64_t(cfg) + int64_t(pag);
    auto latents = noise.to(at::kFloat);
    if (text.embeds.size(0) != mult * latents.size(0))
        throw UsageError("ltx2_image: the text batch has " + std::to_string(text.embeds.size(0)) + " rows; the guidance "
                         "needs " + std::to_string(mult) + " (image_text_batch)");
    const auto f32 = latents.options().dtype(at::kFloat);
    std::optional<at::Tensor> pmask;
    if (pag) {
        pmask = at::ones({mult * latents.size(0)}, f32);
        pmask->narrow(0, (mult - 1) * latents.size(0), latents.size(0)).zero_();
    }
    // Only CFG and PAG are guidance here; guided_velocity adds the deltas in the reference's order (cfg, then the
    // perturbed pass in the STG slot) and rescales towards the conditional prediction.
    const GuidanceScales scales{s.guidance.cfg, s.guidance.pag, 1.0, s.guidance.rescale};
    const GuidancePasses passes{cfg, pag, false};
    require_finite_schedule(schedule, "ltx2_image");
    const int total = int(schedule.timesteps.size());
    for (int i = 0; i < total; ++i) {
        if (s.check_interrupted) s.check_interrupted(i);
        const float sigma = schedule.sigmas[size_t(i)], sigma_next = schedule.sigmas[size_t(i) + 1];
        ImageTransformerInputs in;
        in.hidden_states = (mult > 1 ? at::cat(std::vector<at::Tensor>(size_t(mult), latents)) : latents).to(s.dtype);
        in.encoder_hidden_states = text.embeds;
        in.encoder_attention_mask = text.mask;
        in.timestep = at::full({in.hidden_states.size(0)}, schedule.timesteps[size_t(i)], f32);
        in.height = g.latent_height;
        in.width = g.latent_width;
        if (pag) {
            in.pag_blocks = s.guidance.pag_blocks;
            in.perturbation_mask = pmask;
        }
        // sea (Note [Step caching]): the gate reads the step's sigma (the scheduler's float32 value) and the latents the
        // transformer receives as one-frame videos, (C, 1, H, W) per sample of the guidance batch (LTX2Pipeline's
        // _unpack_latents with one frame).
        if (s.step_cache && s.step_cache->settings().kind == model::StepCacheKind::sea) {
            const auto & x = in.hidden_states;
            s.step_cache->observe("cond_uncond", double(sigma),
                                  x.reshape({x.size(0), 1, g.latent_height, g.latent_width, -1}).permute({0, 4, 1, 2, 3})
                                      .unbind(0));
        }
        auto v = image_forward(c, dit, in, s.step_cache, "cond_uncond", i).to(at::kFloat);
        if (cfg || pag) {
            const auto parts = v.chunk(mult, 0);
            Predictions p;
            p.cond = parts[cfg ? 1 : 0];
            if (cfg) p.uncond = parts[0];
            if (pag) p.stg = parts[size_t(mult - 1)];
            v = guided_velocity(latents, p, sigma, scales, passes);
        }
        latents = model::euler_step(latents, v, sigma, sigma_next);
        if (!at::isfinite(latents).all().item<bool>())
            throw RuntimeError("ltx2_image: the latents stopped being finite at denoising step " + std::to_string(i + 1) +
                               " of " + std::to_string(total) + " (sigma " + std::to_string(sigma) +
                               "); in bf16/fp16 this is an overflow (try workload.precision=fp32), otherwise a broken "
                               "checkpoint");
        if (s.on_step) s.on_step(i + 1, total);
    }
    return latents;
}

StrengthSigmas strength_sigmas(int steps, double strength, const std::string & key) {
    if (!std::isfinite(strength) || strength <= 0.0 || strength > 1.0)
        throw UsageError(key + " = " + std::to_string(strength) + ": the img2img strength must be in (0, 1] (the "
                         "share of the schedule that is denoised again; 1 starts from pure noise)");
    const auto grid = model::default_sigmas(steps);  // UsageError for steps < 1
    // The original computes in Python floats (double): init = min(steps * strength, steps), int() truncates.
    const double init = std::min(double(steps) * strength, double(steps));
    const int t_start = int(std::max(double(steps) - init, 0.0));
    StrengthSigmas r;
    r.t_start = t_start;
    r.sigmas.assign(grid.begin() + t_start, grid.end());
    if (r.sigmas.empty())  // unreachable for strength > 0; the original raises the same way
        throw UsageError(key + " = " + std::to_string(strength) + " leaves no denoising step of " +
                         std::to_string(steps) + "; raise the strength");
    return r;
}

Img2ImgDraws draw_img2img_noise(int64_t channels, const ImageGeometry & g, int64_t batch, uint64_t seed,
                                at::ScalarType vae_dtype) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const std::vector<int64_t> shape{batch, channels, 1, g.latent_height, g.latent_width};
    Img2ImgDraws d;
    d.posterior_eps = at::randn(shape, gen, at::TensorOptions().dtype(vae_dtype));
    d.noise = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
    return d;
}

at::Tensor posterior_sample(const at::Tensor & moments, const at::Tensor & eps) {
    const auto parts = moments.chunk(2, 1);
    const auto std = at::exp(0.5 * parts[1].clamp(-30.0, 20.0));
    return parts[0] + std * eps.to(moments.options());
}

at::Tensor normalize_image_latents(const at::Tensor & encoded, const model::TensorFile & vae, const VideoVaeConfig & c) {
    const auto stats = read_video_latent_stats(vae, c);
    const auto opts = encoded.options();
    const auto mean = stats.mean.to(opts).view({1, -1, 1, 1, 1});
    const auto std = stats.std.to(opts).view({1, -1, 1, 1, 1});
    return ((encoded - mean) * c.scaling_factor / std).to(at::kFloat);
}

at::Tensor img2img_start(const at::Tensor & x0, const at::Tensor & noise, const model::FlowMatchSchedule & schedule) {
    if (schedule.sigmas.empty()) throw UsageError("ltx2_image: img2img needs a schedule of at least one step");
    // scale_noise computes in the sample's dtype (float32) with sigma a float32 tensor: 1 - sigma rounds in float.
    const float sigma = schedule.sigmas.front();
    const auto x = x0.to(at::kFloat), n = noise.to(x.options());
    const auto noised = n * sigma + x * (1.0f - sigma);
    return noised.permute({0, 2, 3, 4, 1}).flatten(1, 3).contiguous();
}

at::Tensor image_latents_for_decode(const at::Tensor & packed, const ImageGeometry & g, const model::TensorFile & vae,
                                    const VideoVaeConfig & c) {
    const int64_t b = packed.size(0), ch = packed.size(2);
    auto z = packed.reshape({b, 1, g.latent_height, g.latent_width, ch}).permute({0, 4, 1, 2, 3});
    const auto stats = read_video_latent_stats(vae, c);
    return denormalize_video_latents(z, stats.mean, stats.std, c.scaling_factor);
}

at::Tensor image_of(const at::Tensor & decoded) {
    return (decoded[0].select(1, 0).to(at::kFloat) / 2 + 0.5).clamp(0, 1);
}

}  // namespace ddo::ltx2
