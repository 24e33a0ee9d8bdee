#include "scheduler.hpp"

#include <cmath>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {

double calculate_shift(double image_seq_len, const SchedulerConfig & c) {
    const double m = (c.max_shift - c.base_shift) / double(c.max_image_seq_len - c.base_image_seq_len);
    const double b = c.base_shift - m * double(c.base_image_seq_len);
    return image_seq_len * m + b;
}

std::vector<float> default_sigmas(int steps) {
    if (steps < 1) throw UsageError("qwen_image_21: steps must be >= 1 (got " + std::to_string(steps) + ")");
    // np.linspace(1.0, 1/steps, steps) in float64, then float32.
    std::vector<float> s(steps);
    const double start = 1.0, stop = 1.0 / steps;
    const double step = steps > 1 ? (stop - start) / double(steps - 1) : 0.0;
    for (int i = 0; i < steps; ++i) s[i] = float(start + double(i) * step);
    if (steps > 1) s[steps - 1] = float(stop);  // numpy sets the endpoint exactly
    return s;
}

std::vector<float> sigmas_from(const std::vector<double> & sigmas) {
    if (sigmas.empty()) throw UsageError("qwen_image_21: the sigma list is empty; give at least one sigma");
    std::vector<float> s;
    for (double v : sigmas) s.push_back(float(v));
    return s;
}

FlowMatchSchedule make_schedule(const SchedulerConfig & c, std::vector<float> s, std::optional<double> mu) {
    if (s.empty()) throw UsageError("qwen_image_21: the sigma list is empty");

    if (c.use_dynamic_shifting) {
        if (!mu) throw UsageError("qwen_image_21: the scheduler uses dynamic shifting, which needs mu");
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

}  // namespace ddo::qwen_image_21
