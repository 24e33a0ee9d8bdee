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

// set_timesteps(sigmas=linspace(1, 1/steps, steps), mu=mu) as the Qwen-Image 2.1 pipeline calls it.
FlowMatchSchedule make_schedule(const SchedulerConfig & c, int steps, std::optional<double> mu);

}  // namespace ddo::qwen_image_21
