#include "ddo/model/flow_match.hpp"

#include <cmath>

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/config_json.hpp"

namespace ddo::model {

FlowMatchConfig FlowMatchConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    FlowMatchConfig c;
    read_config_key(j, "num_train_timesteps", c.num_train_timesteps, file);
    read_config_key(j, "shift", c.shift, file);
    read_config_key(j, "use_dynamic_shifting", c.use_dynamic_shifting, file);
    read_config_key(j, "base_shift", c.base_shift, file);
    read_config_key(j, "max_shift", c.max_shift, file);
    read_config_key(j, "base_image_seq_len", c.base_image_seq_len, file);
    read_config_key(j, "max_image_seq_len", c.max_image_seq_len, file);
    if (auto it = j.find("shift_terminal"); it != j.end() && !it->is_null()) {
        double v = 0;
        read_config_key(j, "shift_terminal", v, file);
        if (v != 0.0) c.shift_terminal = v;  // diffusers tests `if self.config.shift_terminal:`
    }
    read_config_key(j, "time_shift_type", c.time_shift_type, file);
    read_config_key(j, "invert_sigmas", c.invert_sigmas, file);
    for (const char * k : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"}) {
        bool v = false;
        read_config_key(j, k, v, file);
        require_config(!v, file, std::string(k) + " is not supported by ddo's flow-match schedule (must be false)");
    }
    require_config(c.time_shift_type == "exponential" || c.time_shift_type == "linear", file,
            "time_shift_type must be 'exponential' or 'linear'");
    return c;
}


double calculate_shift(double image_seq_len, const FlowMatchConfig & c) {
    const double m = (c.max_shift - c.base_shift) / double(c.max_image_seq_len - c.base_image_seq_len);
    const double b = c.base_shift - m * double(c.base_image_seq_len);
    return image_seq_len * m + b;
}

std::vector<float> default_sigmas(int steps) {
    if (steps < 1) throw UsageError("steps must be >= 1 (got " + std::to_string(steps) + ")");
    // np.linspace(1.0, 1/steps, steps) in float64, then float32.
    std::vector<float> s(steps);
    const double start = 1.0, stop = 1.0 / steps;
    const double step = steps > 1 ? (stop - start) / double(steps - 1) : 0.0;
    for (int i = 0; i < steps; ++i) s[i] = float(start + double(i) * step);
    if (steps > 1) s[steps - 1] = float(stop);  // numpy sets the endpoint exactly
    return s;
}

std::vector<float> sigmas_from(const std::vector<double> & sigmas) {
    if (sigmas.empty()) throw UsageError("the sigma list is empty; give at least one sigma");
    std::vector<float> s;
    for (double v : sigmas) s.push_back(float(v));
    return s;
}

FlowMatchSchedule make_schedule(const FlowMatchConfig & c, std::vector<float> s, std::optional<double> mu) {
    if (s.empty()) throw UsageError("the sigma list is empty");

    if (c.use_dynamic_shifting) {
        if (!mu) throw UsageError("the scheduler uses dynamic shifting, which needs mu");
        if (c.time_shift_type == "exponential") {
            const float e = float(std::exp(*mu));  // python float scalar -> float32 under NEP 50
            for (float & v : s) v = e / (e + (1.0f / v - 1.0f));
        } else {
            const float m = float(*mu);
            for (float & v : s) v = m / (m + (1.0f / v - 1.0f));
        }
    } else {
        const float sh = float(c.shift);
        for (float & v : s) v = sh * v / (1.0f + (sh - 1.0f) * v);
    }
    if (c.shift_terminal) {
        const float last = 1.0f - s.back();
        const float scale = last / (1.0f - float(*c.shift_terminal));
        for (float & v : s) v = 1.0f - ((1.0f - v) / scale);
    }
    FlowMatchSchedule out;
    const float ntt = float(c.num_train_timesteps);
    if (c.invert_sigmas) {
        for (float & v : s) v = 1.0f - v;
    }
    for (float v : s) out.timesteps.push_back(v * ntt);
    out.sigmas = s;
    out.sigmas.push_back(c.invert_sigmas ? 1.0f : 0.0f);
    return out;
}

void require_finite(const FlowMatchSchedule & s, const std::string & model, const std::string & cause_and_fix) {
    for (size_t i = 0; i < s.sigmas.size(); ++i) {
        const bool finite = std::isfinite(s.sigmas[i]) && (i >= s.timesteps.size() || std::isfinite(s.timesteps[i]));
        if (!finite)
            throw UsageError(model + ": the sigma schedule is not finite (sigma " + std::to_string(i + 1) + " of " +
                             std::to_string(s.sigmas.size()) + " is " + std::to_string(s.sigmas[i]) + "): " +
                             cause_and_fix);
    }
}

at::Tensor euler_step(const at::Tensor & x, const at::Tensor & velocity, float sigma, float sigma_next) {
    // sample.to(float32) + dt * model_output, dt a 0-dim float32 tensor: the product keeps model_output's dtype
    // (a 0-dim tensor does not promote), the sum is float32.
    const float dt = sigma_next - sigma;
    return x.to(at::kFloat) + at::scalar_tensor(dt, velocity.options().dtype(at::kFloat)) * velocity;
}

}  // namespace ddo::model
