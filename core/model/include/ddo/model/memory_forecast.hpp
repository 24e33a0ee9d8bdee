// The memory forecast (Note [Memory forecast] in docs/architecture.md): what each phase of a run will hold at its
// peak, on the device and on the host, known before anything loads. A plugin states shapes (StageMemory: the tensors
// a stage holds at its peak, as a function of the workload); the kit does the arithmetic: the allocator's rounding,
// the weights' footprint from the offload engine's plan, the sum per phase, the budget and the margin, and what
// size would fit when the asked one does not.
//
//   run.forecast_memory({width, height, 1}, [&](const model::ForecastShape & s) {
//       model::StageMemory denoise("denoise");
//       denoise.weights("transformer").tensor("latents", {B, s.height / 16 * s.width / 16, C}, dtype);
//       return std::vector<model::StageMemory>{denoise};
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include "ddo/model/memory_budget.hpp"

namespace ddo::model {

// Bytes on each side. On the CPU the device is host memory: both sides are the same RAM (Note [Memory forecast]).
struct Footprint {
    std::uint64_t device = 0, host = 0;
};

enum class MemorySide { device, host };
const char * to_string(MemorySide s) noexcept;

// `count` allocations of `bytes_each` held together at the stage's peak on `side`; `what` says which tensors (the
// shape as the plugin stated it) and why they are live at the peak.
struct MemoryTerm {
    std::string name;
    MemorySide side = MemorySide::device;
    std::uint64_t bytes_each = 0;
    std::uint64_t count = 1;
    std::string what;
};

// What one phase of a run holds at its peak, as the plugin states it. A phase that opens its components one after
// another (LTX-2's decode_audio: the audio VAE, unloaded, then the vocoder) is stated as one StageMemory per part,
// each with the phase's name and its part's (part()), in order: the phase's peak is its largest part's.
class StageMemory {
public:
    explicit StageMemory(std::string phase, std::string part = "") : phase_(std::move(phase)), part_(std::move(part)) {}
    // `count` tensors of `shape` in `dtype`. A non-positive extent is a bug in the plugin's model (std::logic_error).
    StageMemory & tensor(std::string name, const std::vector<std::int64_t> & shape, at::ScalarType dtype,
                         std::int64_t count = 1, MemorySide side = MemorySide::device, std::string what = "");
    // A term already in bytes (a table whose size the plugin computes: a RoPE table, a model's own buffers).
    StageMemory & bytes(std::string name, std::uint64_t bytes, MemorySide side = MemorySide::device, std::string what = "");
    // The weights of `component` are open in this phase: its footprint (ModelRun::forecast_weights) is added here.
    StageMemory & weights(std::string component);

    const std::string & phase() const noexcept { return phase_; }
    const std::string & part() const noexcept { return part_; }
    const std::vector<MemoryTerm> & terms() const noexcept { return terms_; }
    const std::vector<std::string> & components() const noexcept { return components_; }

private:
    std::string phase_, part_;
    std::vector<MemoryTerm> terms_;
    std::vector<std::string> components_;
};

// The workload extents a stage model is evaluated at: the asked ones, and the smaller ones tried for "what fits".
struct ForecastShape {
    std::int64_t width = 0, height = 0, frames = 1;
};
using StageModel = std::function<std::vector<StageMemory>(const ForecastShape &)>;

// The machine the forecast is held against: each side's budget with its source (--device-memory, a machine profile,
// or this machine's available memory), and the link between host and device when known (a profile's PCIe bandwidth).
struct MachineBudget {
    MemoryBudget device, host;
    bool device_is_host = false;  // the CPU: both sides draw on host RAM, held against the host budget together
    std::optional<double> link_gb_per_s;
    std::string link_source;
    std::string name;  // the machine profile's name; empty: this machine
};

struct PhaseForecast {
    std::string phase;
    Footprint peak;                 // bytes after rounding, weights included (of a phase in parts: each side's largest)
    Footprint weights;              // of which: the components' weights (of a phase in parts: the largest part's)
    std::vector<MemoryTerm> terms;  // the stage's terms, as stated (of a phase in parts: the largest part's)
    std::string part;               // of a phase in parts: the largest part (by device and host together)
    std::vector<std::string> parts; // of a phase in parts: every part, in order
};

// Allocation rounding: CUDA's caching allocator hands out blocks in multiples of 512 bytes; the CPU allocator's
// blocks are 64-byte aligned (c10::alloc_cpu) and malloc adds its header (Note [Memory forecast]).
std::uint64_t rounded_bytes(std::uint64_t bytes, bool cuda) noexcept;

class MemoryForecast {
public:
    explicit MemoryForecast(bool cuda) : cuda_(cuda) {}
    void set_weights(const std::string & component, Footprint planned, nlohmann::json detail);
    bool has_weights(const std::string & component) const;
    // The stages' peaks, one per phase (consecutive stages of one phase are its parts). std::logic_error for a stage
    // naming weights that were not set (a plugin bug).
    std::vector<PhaseForecast> evaluate(const std::vector<StageMemory> & stages) const;
    // The first phase whose peak exceeds the budget: its forecast and the budget bytes it exceeds (nullopt: all fit,
    // or the budget is unknown).
    struct Excess {
        std::string phase, side;  // side: device | host | host (device and host together, on the CPU)
        std::uint64_t forecast = 0, budget = 0;
    };
    static std::optional<Excess> first_excess(const std::vector<PhaseForecast> & phases, const MachineBudget & m);
    // The report's forecast.phases[] (each phase's peaks, terms, budget and margin).
    static nlohmann::json phases_json(const std::vector<PhaseForecast> & phases, const MachineBudget & m, bool cuda);
    const nlohmann::json & weights_json() const noexcept { return weights_json_; }

private:
    bool cuda_;
    std::map<std::string, Footprint> weights_;
    nlohmann::json weights_json_ = nlohmann::json::object();
};

// The largest extents that fit `m` with `margin` to spare (each budget divided by 1 + margin: the forecast's tolerance,
// so that what is suggested stays under the budget when measured) at the asked aspect ratio, sizes floored to
// `multiple` and no smaller than one multiple; frames (when asked > 1) of the form frame_step * k + 1 at the asked
// size. nullopt: nothing tried fits.
struct FittingShape {
    std::optional<ForecastShape> size;    // the asked frames, the largest size that fits
    std::optional<ForecastShape> frames;  // the asked size, the most frames that fit (video only)
};
FittingShape largest_fitting(const MemoryForecast & f, const StageModel & model, const ForecastShape & asked,
                             const MachineBudget & m, std::int64_t multiple, std::int64_t frame_step,
                             double margin = 0);

}  // namespace ddo::model
