#include "guidance.hpp"

#include <numeric>
#include <vector>

namespace ddo::ltx2 {

GuidancePasses guidance_passes(const GuidanceScales & v, const GuidanceScales & a) {
    // do_classifier_free_guidance / do_spatio_temporal_guidance / do_modality_isolation_guidance.
    return {v.cfg > 1.0 || a.cfg > 1.0, v.stg > 0.0 || a.stg > 0.0, v.modality > 1.0 || a.modality > 1.0};
}

at::Tensor rescale_noise_cfg(const at::Tensor & guided, const at::Tensor & cond, double r) {
    std::vector<int64_t> dims(size_t(cond.dim() - 1));
    std::iota(dims.begin(), dims.end(), 1);
    const auto std_text = cond.std(dims, /*unbiased=*/true, /*keepdim=*/true);
    const auto std_cfg = guided.std(dims, /*unbiased=*/true, /*keepdim=*/true);
    const auto rescaled = guided * (std_text / std_cfg);
    return r * rescaled + (1 - r) * guided;
}

at::Tensor guided_x0(const at::Tensor & x, const Predictions & p, float sigma, const GuidanceScales & s,
                     const GuidancePasses & passes) {
    // convert_velocity_to_x0: sample - v * sigmas[i] (sigmas a float32 tensor: a 0-dim float32 scalar here).
    const auto sig = at::scalar_tensor(sigma, x.options().dtype(at::kFloat));
    auto x0 = [&](const at::Tensor & v) { return x - v * sig; };
    const auto cond = x0(p.cond);
    auto guided = cond;
    // The deltas are added in the reference's order: cond + cfg + stg + modality.
    if (passes.cfg) guided = guided + (s.cfg - 1) * (cond - x0(*p.uncond));
    if (passes.stg) guided = guided + s.stg * (cond - x0(*p.stg));
    if (passes.isolate) guided = guided + (s.modality - 1) * (cond - x0(*p.isolated));
    return s.rescale > 0 ? rescale_noise_cfg(guided, cond, s.rescale) : guided;
}

at::Tensor velocity_of(const at::Tensor & x, const at::Tensor & x0, float sigma) {
    return (x - x0) / at::scalar_tensor(sigma, x.options().dtype(at::kFloat));
}

at::Tensor guided_velocity(const at::Tensor & x, const Predictions & p, float sigma, const GuidanceScales & s,
                           const GuidancePasses & passes) {
    return velocity_of(x, guided_x0(x, p, sigma, s, passes), sigma);
}

}  // namespace ddo::ltx2
