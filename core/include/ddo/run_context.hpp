// ddo::RunContext: what the host hands a model plugin's `run` (the C type ddo_run_context).
// Model plugins are rebuilt with the host (exact fingerprint), so this C++ type may cross.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/ddo_model_plugin.h"

namespace ddo {

class ResolvedSettings;  // ddo/preset/resolved_settings.hpp
class RunTracker;        // ddo/report/run_tracker.hpp

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
    std::filesystem::path prompt_embeds;           // optional: precomputed prompt embeddings
    std::atomic<bool> * interrupted = nullptr;     // set by the host on SIGINT; poll between steps
    bool dry_run = false;                          // resolve and plan, compute nothing

    static RunContext & from_c(ddo_run_context * c) { return *reinterpret_cast<RunContext *>(c); }
    ddo_run_context * to_c() { return reinterpret_cast<ddo_run_context *>(this); }
};

}  // namespace ddo
