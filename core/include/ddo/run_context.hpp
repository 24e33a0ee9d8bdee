// ddo::RunContext: what the host hands a model plugin's `run` (the C type ddo_run_context).
// Model plugins are rebuilt with the host (exact fingerprint), so this C++ type may cross.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/ddo_model_plugin.h"

namespace ddo {

class ResolvedSettings;  // ddo/preset/resolved_settings.hpp
class RunTracker;        // ddo/report/run_tracker.hpp
struct SessionSlot;      // ddo/run_session.hpp

// One progress event of a run (ddo/model/model_run.hpp sends them): the host turns them into its display.
struct ProgressEvent {
    std::string phase;           // load | encode | denoise | decode | write
    int step = 0;                // 1-based steps done in this phase (0: the phase began)
    int total = 0;               // steps of the phase (0: unknown)
    double step_seconds = 0;     // host wall time of the last step
    double phase_seconds = 0;    // host wall time since the phase began
};

// The machine a run's memory forecast is held against (--device-memory, --host-memory, --machine NAME: a profile in
// presets/machines/; Note [Memory forecast] in docs/architecture.md). Unset values: this machine's available memory.
struct MachineSpec {
    std::string name;                            // the profile's name; empty: none given
    std::optional<std::uint64_t> device_bytes;   // usable device memory
    std::optional<std::uint64_t> host_bytes;     // usable host memory
    std::optional<double> link_gb_per_s;         // host-to-device bandwidth (a profile's PCIe link), GB/s
    std::string device_source, host_source, link_source;  // the flag or profile file each came from
};

struct RunContext {
    const ResolvedSettings * settings = nullptr;   // borrowed: resolved preset with provenance
    RunTracker * tracker = nullptr;                // borrowed: phases, counters, routes -> report
    // The allocator plugin named by the preset (capacities.allocator; "auto" = linear), loaded and verified by
    // the host through the same PluginRegistry (process lifetime). Null when it could not be loaded: then
    // allocator_error says why, and a route that needs the offload engine refuses with it.
    const ddo_allocator_vtable * allocator_vtable = nullptr;
    std::string allocator_name;
    std::string allocator_error;
    std::filesystem::path model_dir;               // diffusers-layout checkpoint directory
    std::filesystem::path output_dir;              // where the plugin writes its outputs
    std::filesystem::path output_file;             // -o/--output-file: the (first) image itself; empty = <output_dir>/image.png
    bool overwrite = false;                        // --overwrite: existing outputs may be replaced
    std::filesystem::path prompt_embeds;           // optional: precomputed prompt embeddings
    std::atomic<bool> * interrupted = nullptr;     // set by the host on SIGINT; poll between steps
    bool dry_run = false;                          // resolve and plan, compute nothing
    std::filesystem::path report_path;             // where the host writes the run report (for output metadata)
    bool hash_weights = false;                     // --hash-weights: full content hash of every checkpoint file
    std::function<void(const ProgressEvent &)> progress;  // may be empty; called on the plugin's thread
    std::filesystem::path latents;                 // --latents FILE: initial noise instead of the seeded draw
    bool encode_only = false;                      // `ddo-host encode`: write prompt embeddings to output_file only
    // --save-latents FILE: the denoised latents written (safetensors, the workload in its metadata) before decoding;
    // --decode-latents FILE: decode such a file only (no text encoder, no denoising). Empty: not asked.
    std::filesystem::path save_latents;
    std::filesystem::path decode_latents;
    // --transformer FILE, --text-encoder FILE: component name -> a single file that replaces the folder's weights
    // (Note [Component files]). A plugin whose run does not read that component refuses it (exit 2).
    std::map<std::string, std::filesystem::path> component_files;
    // `ddo-host serve`: what the server keeps between its runs (weights, prompt embeddings; ddo/run_session.hpp).
    // Borrowed; null for a CLI run, which keeps nothing.
    SessionSlot * session = nullptr;
    MachineSpec machine;  // --device-memory / --host-memory / --machine: the forecast's budgets

    static RunContext & from_c(ddo_run_context * c) { return *reinterpret_cast<RunContext *>(c); }
    ddo_run_context * to_c() { return reinterpret_cast<ddo_run_context *>(this); }
};

}  // namespace ddo
