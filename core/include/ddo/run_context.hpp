// ddo::RunContext: what the host hands a model plugin's `run` (the C type ddo_run_context).
// Model plugins are rebuilt with the host (exact fingerprint), so this C++ type may cross.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "ddo/ddo_model_plugin.h"

namespace ddo {

class ResolvedSettings;  // ddo/preset/resolved_settings.hpp
class RunTracker;        // ddo/report/run_tracker.hpp
class AllocatorPlugin;   // ddo/plugin/allocator_plugin.hpp

struct RunContext {
    const ResolvedSettings * settings = nullptr;   // borrowed: resolved preset with provenance
    RunTracker * tracker = nullptr;                // borrowed: phases, counters, routes -> report
    const AllocatorPlugin * allocator = nullptr;   // borrowed: the allocator chosen by the preset
    std::filesystem::path model_dir;               // diffusers-layout checkpoint directory
    std::filesystem::path output_dir;              // where the plugin writes its outputs
    std::filesystem::path prompt_embeds;           // optional: precomputed prompt embeddings
    std::atomic<bool> * interrupted = nullptr;     // set by the host on SIGINT; poll between steps
    bool dry_run = false;                          // resolve and plan, compute nothing

    static RunContext & from_c(ddo_run_context * c) { return *reinterpret_cast<RunContext *>(c); }
    ddo_run_context * to_c() { return reinterpret_cast<ddo_run_context *>(this); }
};

}  // namespace ddo
