// The component plans the tests run the offload engine on: what ModelRun::plan makes from a preset for a CPU
// placement (CPU transport), on the linear allocator plugin the build writes into the plugin folder.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "ddo/model/component_plan.hpp"
#include "ddo/plugin/plugin_registry.hpp"

namespace ddo::test {

// The linear allocator plugin of `plugin_dir` (borrowed: discovered once per folder, loaded for the life of the
// process); the caller checks it is not null.
inline const ddo_allocator_vtable * linear_allocator(const std::filesystem::path & plugin_dir) {
    static std::map<std::filesystem::path, PluginRegistry> registries;
    auto it = registries.find(plugin_dir);
    if (it == registries.end()) it = registries.emplace(plugin_dir, PluginRegistry::discover({plugin_dir})).first;
    return it->second.load("linear", "allocator").allocator;
}

// `component` on `route` with a resident budget of `resident_gb`, 2 staging slots, prefetch depth 1 and no RAM
// headroom, on `linear` (borrowed: the linear allocator plugin).
inline model::ComponentPlan cpu_plan(const std::string & component, Route route, const ddo_allocator_vtable * linear,
                                     double resident_gb = 0) {
    model::ComponentPlan p;  // what ModelRun::plan makes from a preset (CPU placement)
    p.component = component;
    p.route = route;
    p.capacities.resident_budget_gb = resident_gb;
    p.capacities.staging_slots = 2;
    p.capacities.prefetch_depth = 1;
    p.capacities.ram_headroom_gb = 0;
    p.allocator = linear;
    p.allocator_name = "linear";
    return p;
}

}  // namespace ddo::test
