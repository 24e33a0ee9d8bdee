// LTX2Pipeline guidance in x0 space (models.md §5.12 step 6; diffusers pipeline_ltx2.py __call__): the
// conditional prediction is turned into x0 = x - v * sigma, the deltas of classifier-free guidance (uncond text),
// spatio-temporal guidance (STG: the pass with self-attention replaced by V in the listed blocks) and modality
// isolation (the pass without a2v/v2a) are added, the result is optionally rescaled towards the conditional
// prediction's std (rescale_noise_cfg), and turned back into a velocity (x - x0) / sigma. With every guidance off
// the round trip is the reference's no-op up to float32 rounding, which ddo reproduces by doing it anyway.
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace ddo::ltx2 {

// One modality's scales (the pipeline's guidance_scale, stg_scale, modality_scale, guidance_rescale or their audio_*).
struct GuidanceScales {
    double cfg = 1.0;       // > 1: an unconditional pass
    double stg = 0.0;       // > 0: an STG pass
    double modality = 1.0;  // > 1: a modality-isolated pass
    double rescale = 0.0;   // > 0: rescale_noise_cfg
};

// Which extra passes a step needs: the pipeline decides for both modalities together.
struct GuidancePasses {
    bool cfg = false, stg = false, isolate = false;
};
GuidancePasses guidance_passes(const GuidanceScales & video, const GuidanceScales & audio);

// Velocities (float32) of one modality from the passes that ran (absent ones unused: pass nullopt).
struct Predictions {
    at::Tensor cond;
    std::optional<at::Tensor> uncond, stg, isolated;
};
// The guided x0 prediction for latents x at sigma (float32): the deltas added to the conditional x0, rescaled.
at::Tensor guided_x0(const at::Tensor & x, const Predictions & p, float sigma, const GuidanceScales & s,
                     const GuidancePasses & passes);
// convert_x0_to_velocity: (x - x0) / sigma, sigma a 0-dim float32 tensor as in the reference.
at::Tensor velocity_of(const at::Tensor & x, const at::Tensor & x0, float sigma);
// The guided velocity for latents x at sigma (float32): velocity_of(x, guided_x0(...)).
at::Tensor guided_velocity(const at::Tensor & x, const Predictions & p, float sigma, const GuidanceScales & s,
                           const GuidancePasses & passes);

// rescale_noise_cfg(noise_cfg, noise_pred_text, r): std over all non-batch dims.
at::Tensor rescale_noise_cfg(const at::Tensor & guided, const at::Tensor & cond, double r);

}  // namespace ddo::ltx2
