// The flow-match Euler schedule every flow-matching model here samples with (diffusers
// FlowMatchEulerDiscreteScheduler: Qwen-Image 2.1, LTX-2): the config of scheduler/scheduler_config.json, the
// pipelines' calculate_shift, the default and configured sigma grids, set_timesteps (dynamic or static shift,
// terminal stretch, inversion) and the Euler step. Torch-free except the step: the arrays are float32 computed in
// the reference's operation order (models.md §7.2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace ddo::model {

// scheduler/scheduler_config.json. Keys a flow-match model may set but this schedule does not implement
// (use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas, stochastic_sampling) must be false.
struct FlowMatchConfig {
    int64_t num_train_timesteps = 1000;
    double shift = 1.0;
    bool use_dynamic_shifting = false;
    double base_shift = 0.5;
    double max_shift = 1.15;
    int64_t base_image_seq_len = 256;
    int64_t max_image_seq_len = 4096;
    std::optional<double> shift_terminal;
    std::string time_shift_type = "exponential";  // or "linear"
    bool invert_sigmas = false;

    // RuntimeError naming `file` and the key for a wrong type or an unsupported value.
    static FlowMatchConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
};

struct FlowMatchSchedule {
    std::vector<float> sigmas;     // steps + 1 (terminal 0, or 1 with invert_sigmas)
    std::vector<float> timesteps;  // steps: sigma * num_train_timesteps
};

// mu = seq_len * m + b (the pipelines' calculate_shift; extrapolates beyond max_seq_len).
double calculate_shift(double image_seq_len, const FlowMatchConfig & c);

// The pipelines' default grid: np.linspace(1.0, 1/steps, steps) (float64, then float32 as set_timesteps reads it).
// UsageError for steps < 1.
std::vector<float> default_sigmas(int steps);
// A configured grid (model_index.json sample_sigmas, a distilled list, the call's sigmas=): float32 of each value.
std::vector<float> sigmas_from(const std::vector<double> & sigmas);

// set_timesteps(sigmas=input, mu=mu): shift, terminal stretch, inversion, terminal sigma appended.
FlowMatchSchedule make_schedule(const FlowMatchConfig & c, std::vector<float> input, std::optional<double> mu);
inline FlowMatchSchedule make_schedule(const FlowMatchConfig & c, int steps, std::optional<double> mu) {
    return make_schedule(c, default_sigmas(steps), mu);
}

// A schedule the Euler steps can sample, checked before the first step: UsageError (exit 2) "<model>: the sigma
// schedule is not finite (sigma i of n is nan): <cause_and_fix>" for the first sigma or timestep that is not finite
// (Note [A non-finite schedule is refused before the first step] in docs/architecture.md).
void require_finite(const FlowMatchSchedule & s, const std::string & model, const std::string & cause_and_fix);

// FlowMatchEulerDiscreteScheduler.step without stochastic sampling: x upcast to float32 + (sigma_next - sigma) * v,
// in the reference's dtypes (dt float32, the product in v's dtype). Returns float32.
at::Tensor euler_step(const at::Tensor & x, const at::Tensor & velocity, float sigma, float sigma_next);

}  // namespace ddo::model
