// ComponentPlan: the typed, resolved plan of one component of a model (transformer, text_encoder, vae, ...),
// made by the kit from the resolved settings with their provenance. A model plugin asks ModelRun::plan(c) for
// it and never reads preset keys one by one. The plan is what the weight source (component_weights.hpp) and
// the VAE strategies run on; to_json() is what the report records as requested vs effective.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/engine/route.hpp"
#include "ddo/model/device_placement.hpp"
#include "ddo/preset/resolved_settings.hpp"

namespace ddo::model {

// The VAE strategy a plugin runs, after `auto` was decided by the plugin from the image size (it knows the
// model's tile geometry): tiles in pixels as the reference's tile_sample_min_* / tile_sample_stride_*.
struct VaeTiles {
    int tile = 512;     // vae.tile_size
    int overlap = 64;   // vae.tile_overlap
    int temporal_frames = 16;  // vae.temporal_frames: pixel frames per window of temporal_stream (video VAEs)
    int stride() const { return tile - overlap; }
};

struct ComponentPlan {
    std::string component;
    engine::Route route = engine::Route::dynamic;  // components.<c>.route
    std::string route_source;                      // its provenance
    Capacities capacities;                         // global capacities with the component's overrides
    // components.<c>.use_stream: false = group routes upload synchronously (prefetch depth 0).
    bool use_stream = true;
    // components.<c>.blocks_per_group (group_block): declared groups merged into one engine group, like diffusers'
    // num_blocks_per_group. Any other route refuses a value other than 1 (make_plan).
    int blocks_per_group = 1;
    // The engine's prefetch depth for this plan: capacities.prefetch_depth, 0 when use_stream = false on a group
    // route; and why.
    int prefetch_depth() const;
    std::string prefetch_reason() const;
    // Declared groups (GroupSpec names) the dynamic route keeps resident before the policy picks, when they fit: the
    // blocks a step cache runs on every step (StepCache::always_run; Note [Step caching]). Empty: none.
    std::vector<std::string> resident_first;
    DevicePlacement placement;                     // where it computes (one device per run)
    // The device memory of the machine a run is planned for (--device-memory, --machine; Note [Memory forecast]): the
    // planner's free device memory and the VAE strategies' budget stand for it instead of this machine's. nullopt:
    // this machine's.
    std::optional<std::uint64_t> machine_device_bytes;
    std::string machine_device_source;
    VaeStrategyKind vae_strategy = VaeStrategyKind::automatic;  // vae.strategy (VAE components)
    std::string vae_strategy_source;
    VaeTiles vae_tiles;
    // The allocator plugin the engine runs on: capacities.allocator ("auto" = linear), loaded by the host.
    std::string allocator_requested;
    std::string allocator_name;
    const ddo_allocator_vtable * allocator = nullptr;  // borrowed from the host (process lifetime); may be null
    std::string allocator_error;                       // why it is null
    // plugin.<allocator>.* as the strings ddo_alloc_config carries, and their provenance for the report.
    std::vector<std::pair<std::string, std::string>> allocator_options;
    nlohmann::json allocator_options_report = nlohmann::json::object();

    // {"route": {requested, source}, "allocator_backend": {...}, "allocator": {...}, "allocator_options",
    //  "device", "transport"}: the report's counters.<component>.placement.
    nlohmann::json placement_json() const;
};

// A plan for `component` from the settings. allocator/allocator_name/allocator_error come from the host's
// run context (make_plan fills the rest). Throws UsageError for an unknown component, and for
// components.<c>.blocks_per_group != 1 on a route other than group_block (naming the key and the fix).
ComponentPlan make_plan(const ResolvedSettings & settings, const std::string & component, const DevicePlacement & placement,
                        const ddo_allocator_vtable * allocator, const std::string & allocator_name,
                        const std::string & allocator_error);

}  // namespace ddo::model
