// ddo::RunTracker: collects one run's report (docs/metrics.md is the field catalog) and writes it
// atomically. Rules (seeds 003/004, design.md §7): host wall clock and completed CUDA-event time are
// different fields; nested phases record their parent and are never summed; RSS, USS, absolute GPU
// usage, baseline-relative GPU delta and torch allocated/reserved are different monitors, each with
// scope, sampler interval and completeness; anything unavailable is null with a reason, never 0.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo {

class ResolvedSettings;

enum class RunStatus { running, completed, failed, interrupted };
const char * to_string(RunStatus s);

// Filled by the model plugin's hook (torch.cuda.memory_allocated / memory_reserved equivalents).
struct TorchMemory {
    std::uint64_t allocated_bytes = 0;
    std::uint64_t reserved_bytes = 0;
};

struct RunTrackerOptions {
    std::filesystem::path report_path;        // written by write(); empty = write() needs a path
    std::filesystem::path proc_root = "/proc";
    std::filesystem::path sys_root = "/sys";
    std::filesystem::path etc_root = "/etc";
    std::chrono::milliseconds sample_interval{100};  // cheap monitors (RSS from statm, MemAvailable, cgroup, NVML, torch)
    // USS (smaps_rollup, whose cost grows with the mappings) is read at every phase boundary and, between them, only
    // while all telemetry reads so far plus one more USS read stay within this fraction of the run's wall time.
    double cpu_budget_fraction = 0.01;
    bool start_sampler = true;                // false: only explicit sample_now() calls (tests)
    std::string nvml_library = "libnvidia-ml.so.1";  // "" disables NVML (reason recorded)
    unsigned gpu_index = 0;
};

class RunTracker {
public:
    explicit RunTracker(RunTrackerOptions options = {});
    ~RunTracker();
    RunTracker(const RunTracker &) = delete;
    RunTracker & operator=(const RunTracker &) = delete;

    // telemetry.sample_interval_ms / telemetry.cpu_budget_percent, once the settings are resolved: the sampler uses
    // them from its next wake-up, and the report's `sampler` records them.
    void set_sampling(std::chrono::milliseconds interval, double cpu_budget_fraction);

    // From now on every phase boundary, step, counters update, output and the end are also appended to a run journal
    // at `journal_path` (ddo/report/run_journal.hpp; it replaces a stale one), which write() removes once a final
    // report is written. Call it once the report path is claimed. Throws RuntimeError naming the file.
    void start_journal(const std::filesystem::path & journal_path);

    // RAII phase. Opening a phase while another is open on this tracker makes it a child (its
    // parent is recorded; children are never summed into totals). Ends on destruction or end().
    class Phase {
    public:
        Phase(Phase && o) noexcept;
        Phase & operator=(Phase &&) = delete;
        ~Phase();
        // Completed CUDA-event duration for this phase (only once the events completed).
        void set_cuda_event_ms(double ms);
        void note(const std::string & key, nlohmann::json value);
        void end();
        std::size_t index() const { return index_; }

    private:
        friend class RunTracker;
        Phase(RunTracker * t, std::size_t i) : tracker_(t), index_(i) {}
        RunTracker * tracker_;
        std::size_t index_;
    };
    Phase phase(const std::string & name);

    // One denoise step (or any per-step observation) inside `phase`.
    // host_wall_s: host clock interval; cuda_event_ms: completed CUDA-event duration, if resolved.
    void step(const std::string & phase, int index, double host_wall_s,
              std::optional<double> cuda_event_ms = std::nullopt, nlohmann::json extra = nlohmann::json::object());

    // Engine counters for a component (bytes moved, upload/stall time, failures, quarantines,
    // outstanding owners...). Replaces the previous object for that component.
    void set_counters(const std::string & component, nlohmann::json counters);
    void set_route_intended(const std::string & component, const std::string & route, const std::string & source = "");
    void set_route_executed(const std::string & component, const std::string & route, const std::string & note = "");
    // The run does not use `component` (a vision tower without reference images, a text encoder when the embeddings
    // come from a file): routes.<c>.used false, executed null, executed_reason "not used: <reason>". A component
    // later executed in the same run (set_route_executed) is used after all.
    void set_route_unused(const std::string & component, const std::string & reason);

    void set_workload(nlohmann::json workload);
    void set_settings(const ResolvedSettings & settings);   // also records the preset identity
    void set_plugin(nlohmann::json plugin);                 // name, version, file, sha256, fingerprint
    void add_artifact(const std::string & role, const std::string & name, const std::filesystem::path & path,
                      const std::string & sha256);
    void set_checkpoint(nlohmann::json checkpoint);
    // Linux admission observations at setup (ddo/platform/linux_admission.hpp, LinuxObservations::to_json).
    void set_admission(nlohmann::json observations);
    void add_output(const std::filesystem::path & path, const std::string & kind);  // hashes the file
    // An output whose bytes the caller wrote and hashed (sha256 of exactly those bytes); `facts` (an object, or
    // null) describe it (codecs, frames, duration) under outputs[].facts.
    void add_output_written(const std::filesystem::path & path, const std::string & kind, std::uint64_t bytes,
                            const std::string & sha256, nlohmann::json facts = nullptr);
    void set_command_line(std::vector<std::string> argv);
    void set_dry_run(bool dry_run);
    void note(const std::string & key, nlohmann::json value);  // free-form "notes" object
    // The report's step_cache: the step cache's settings and summary (model::StepCache::summary); null, with
    // step_cache_reason, when none ran.
    void set_step_cache(nlohmann::json summary);
    // The report's forecast: each phase's forecast device and host peaks beside the measured ones (Note [Memory
    // forecast]); null, with forecast_reason, when the plugin made none.
    void set_forecast(nlohmann::json forecast);
    // A value the run changed from what was requested (size floored to the model's multiple, guidance without a
    // negative prompt, ...): "adjustments" gets {key, requested, effective, reason}; a second one for the same key
    // replaces the first.
    void add_adjustment(const std::string & key, nlohmann::json requested, nlohmann::json effective,
                        const std::string & reason);

    using TorchMemoryHook = std::function<std::optional<TorchMemory>()>;
    void set_torch_memory_hook(TorchMemoryHook hook, std::string torch_version);
    // No hook applies (e.g. the run computes on the CPU): the torch monitors stay null with this reason
    // instead of "no hook registered". Clears a registered hook.
    void set_torch_memory_unavailable(std::string reason);
    void set_torch_version(std::string torch_version);

    // Takes one sample of every monitor now (the sampler thread does this every interval).
    void sample_now();

    void mark_completed();
    void mark_failed(int exit_code, const std::string & message, const std::string & kind = "error");
    // exit_code: 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
    void mark_interrupted(const std::string & message = "interrupted by SIGINT", int exit_code = 130);
    RunStatus status() const;

    nlohmann::json to_json() const;
    // Writes to_json() atomically to `path` (or options.report_path): temp file in the same
    // directory, fsync, rename, fsync of the directory. Throws RuntimeError on I/O failure.
    void write(const std::filesystem::path & path = {}) const;

    struct Impl;

private:
    void end_phase(std::size_t index);
    void phase_cuda_ms(std::size_t index, double ms);
    void phase_note(std::size_t index, const std::string & key, nlohmann::json value);
    std::unique_ptr<Impl> impl_;
};

// Atomic JSON write (temp file + fsync + rename + directory fsync). Throws RuntimeError.
void write_json_atomically(const std::filesystem::path & path, const nlohmann::json & j);

}  // namespace ddo
