// The LTX-2 image pipeline (models.md §6; the image variant has no upstream diffusers pipeline: the reference is the
// composition in tools/reference/ltx2_image_fixtures.py, which follows DEVAIEXP/ltx2-image-diffusers
// modular_blocks_ltx2_image.py): the checkpoint (transformer, connectors, LTX-2.3 video VAE, scheduler) opened and
// cross-checked before anything is computed, the seeded one-frame noise (not normalised), the schedule (mu from
// calculate_shift(h*w, 1024, 4096, 0.95, 2.05)), the denoising loop (one transformer pass per step on the batch
// [neg; pos] with CFG, [neg; pos; pos] with CFG + PAG, [pos; pos] with PAG alone; guidance in x0 space with
// rescale_noise_cfg; Euler), and the frame-0 image of the decoded latents. Img2img (DEVAIEXP LTX2ImageImg2ImgPipeline;
// reference tools/reference/ltx2_image_img2img_fixtures.py; Note [LTX-2 image img2img]): the strength's slice of
// the sigma grid, the posterior sample and the latent noise from one generator, the normalised image latents noised
// with scale_noise at the first kept sigma, then image_denoise on the kept schedule.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "connectors.hpp"
#include "ddo/model/flow_match.hpp"
#include "ddo/model/tensor_file.hpp"
#include "image_connectors.hpp"
#include "image_transformer.hpp"
#include "transformer_config.hpp"
#include "video_vae_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

struct ImageModel {
    std::filesystem::path dir;
    TransformerConfig transformer_config;
    ConnectorsConfig connectors_config;
    VideoVaeConfig vae_config;
    model::FlowMatchConfig scheduler_config;
    nlohmann::json scheduler_json;
    model::TensorFile transformer, connectors, vae;

    // Throws UsageError (an unimplemented config, naming file and key) or RuntimeError (a tensor missing / of the
    // wrong shape or dtype, or components that contradict each other, naming tensor and file).
    // transformer: <model_dir>/transformer, or a file replacing its weights (--transformer FILE, Note [Component files]).
    static ImageModel open(const std::filesystem::path & model_dir, const store::ComponentSource & transformer);
    static ImageModel open(const std::filesystem::path & model_dir) { return open(model_dir, model_dir / "transformer"); }
};

// Latent grid of a height x width image: (H / spatial, W / spatial), one frame.
struct ImageGeometry {
    int64_t height = 0, width = 0;                // pixels
    int64_t latent_height = 0, latent_width = 0;
    int64_t tokens() const { return latent_height * latent_width; }
};
ImageGeometry image_geometry(const VideoVaeConfig & vae, int64_t height, int64_t width);

// randn([B, C, 1, h, w]) from torch.Generator().manual_seed(seed) on the CPU, packed to [B, h*w, C] (float32),
// then moved to `device`.
at::Tensor draw_image_noise(int64_t channels, const ImageGeometry & g, int64_t batch, uint64_t seed, at::Device device);

struct ImageGuidance {
    double cfg = 1.0;        // guidance_scale (> 1: the negative prompt's pass)
    double rescale = 0.7;    // guidance_rescale (applied when CFG or PAG runs)
    double pag = 0.0;        // pag_scale (> 0: the perturbed pass)
    std::vector<int64_t> pag_blocks{28};  // pag_applied_layers
};

struct ImageDenoiseSettings {
    ImageGuidance guidance;
    at::ScalarType dtype = at::kFloat;  // the transformer's dtype (latent_model_input.to(dtype))
    std::function<void(int step)> check_interrupted;
    std::function<void(int step, int total)> on_step;
    // cache.* (ModelRun::step_cache; Note [Step caching]): each step's one transformer pass goes through it as branch
    // "cond_uncond" (the guidance batch is one forward, as LTX2Pipeline's cache_context names it); sea observes the
    // step's sigma and the batch's latents (C, 1, H, W) per sample first. Borrowed; null: every block of every step.
    model::StepCache * step_cache = nullptr;
};

// text: the connectors' output for the guidance batch (image_text_batch). Returns the packed latents [B, h*w, C]
// (float32). Throws RuntimeError naming the step when the latents stop being finite.
at::Tensor image_denoise(const TransformerConfig & c, Weights & dit, const ImageText & text, const ImageGeometry & g,
                         at::Tensor noise, const model::FlowMatchSchedule & schedule, const ImageDenoiseSettings & s);

// The connectors' input batch for the guidance: [pos], [neg; pos], [neg; pos; pos] or [pos; pos] (embeds, masks).
std::pair<at::Tensor, at::Tensor> image_text_batch(const ImageGuidance & g, const at::Tensor & embeds,
                                                   const at::Tensor & mask, const at::Tensor & neg_embeds,
                                                   const at::Tensor & neg_mask);

// ---- img2img (Note [LTX-2 image img2img])

// get_strength_sigmas of the original: the grid linspace(1, 1/steps, steps) (float32), t_start = int(max(steps -
// min(steps * strength, steps), 0)), the kept grid[t_start:] -- unshifted: ltx2_schedule shifts it (mu from h*w).
struct StrengthSigmas {
    std::vector<float> sigmas;  // the kept grid (steps - t_start values, at least one)
    int t_start = 0;            // steps skipped
};
// UsageError naming `key` (where the strength came from) for a strength outside (0, 1] or not finite, and for
// steps < 1.
StrengthSigmas strength_sigmas(int steps, double strength, const std::string & key = "workload.strength");

// The two draws of the run's one generator (torch.Generator().manual_seed(seed) on the CPU), in the original's
// order: the posterior's epsilon (randn of the latent shape in the VAE's dtype: DiagonalGaussianDistribution.sample),
// then the latent noise (randn float32). Both [B, C, 1, h, w] on the CPU.
struct Img2ImgDraws {
    at::Tensor posterior_eps, noise;
};
Img2ImgDraws draw_img2img_noise(int64_t channels, const ImageGeometry & g, int64_t batch, uint64_t seed,
                                at::ScalarType vae_dtype);

// DiagonalGaussianDistribution(moments).sample with the drawn epsilon: moments [B, 2C, 1, h, w] (the encoder's
// output: C means, then C log-variances), mean + exp(0.5 * clamp(logvar, -30, 20)) * eps in the moments' dtype.
at::Tensor posterior_sample(const at::Tensor & moments, const at::Tensor & eps);

// The sampled VAE latents [B, C, 1, h, w] normalised as the original (x - mean) * scaling_factor / std (statistics
// cast to the latents' dtype), then float32.
at::Tensor normalize_image_latents(const at::Tensor & encoded, const model::TensorFile & vae, const VideoVaeConfig & c);

// FlowMatchEulerDiscreteScheduler.scale_noise at the schedule's first sigma: sigma * noise + (1 - sigma) * x0 in
// float32 (x0, noise: [B, C, 1, h, w]), packed to [B, h*w, C] -- image_denoise's start on the kept schedule.
at::Tensor img2img_start(const at::Tensor & x0, const at::Tensor & noise, const model::FlowMatchSchedule & schedule);

// Packed latents [B, h*w, C] -> [B, C, 1, h, w], de-normalised (x * std / scaling_factor + mean) for vae.decode.
at::Tensor image_latents_for_decode(const at::Tensor & packed, const ImageGeometry & g, const model::TensorFile & vae,
                                    const VideoVaeConfig & c);
// Decoded [B, 3, F, H, W] in [-1, 1] -> frame 0 of sample 0, [3, H, W] float32 in [0, 1] (VaeImageProcessor
// postprocess: (x / 2 + 0.5).clamp(0, 1)).
at::Tensor image_of(const at::Tensor & decoded);

}  // namespace ddo::ltx2
