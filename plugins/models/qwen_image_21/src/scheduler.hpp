// Flow-match Euler schedule with dynamic shift (diffusers FlowMatchEulerDiscreteScheduler, models.md §2).
// Torch-free: the arrays are float32 computed in the reference's operation order.
#pragma once

#include <optional>
#include <vector>

#include "config.hpp"

namespace ddo::qwen_image_21 {

struct FlowMatchSchedule {
    std::vector<float> sigmas;     // steps + 1 (terminal 0, or 1 with invert_sigmas)
    std::vector<float> timesteps;  // steps: sigma * num_train_timesteps
};

// mu = seq_len * m + b (the pipeline's calculate_shift; extrapolates beyond max_seq_len).
double calculate_shift(double image_seq_len, const SchedulerConfig & c);

// The pipeline's default grid: np.linspace(1.0, 1/steps, steps) (float64, then float32 as set_timesteps reads it).
std::vector<float> default_sigmas(int steps);
// A configured grid (model_index.json sample_sigmas, or the call's sigmas=): np.array(sigmas).astype(float32).
std::vector<float> sigmas_from(const std::vector<double> & sigmas);

// set_timesteps(sigmas=input, mu=mu) as the Qwen-Image 2.1 pipeline calls it: shift, terminal stretch, terminal 0.
FlowMatchSchedule make_schedule(const SchedulerConfig & c, std::vector<float> input, std::optional<double> mu);
// The same on the default grid of `steps`.
inline FlowMatchSchedule make_schedule(const SchedulerConfig & c, int steps, std::optional<double> mu) {
    return make_schedule(c, default_sigmas(steps), mu);
}

}  // namespace ddo::qwen_image_21
