#include "ddo/model/component_plan.hpp"

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

// A preset value as the string an allocator plugin's ddo_kv carries: strings as they are, booleans true/false,
// numbers in JSON notation, arrays and tables as JSON.
std::string kv_string(const nlohmann::json & v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

int ComponentPlan::prefetch_depth() const {
    const bool group_route = route == Route::group_block || route == Route::group_leaf;
    return group_route && !use_stream ? 0 : capacities.prefetch_depth;
}

std::string ComponentPlan::prefetch_reason() const {
    const bool group_route = route == Route::group_block || route == Route::group_leaf;
    if (group_route && !use_stream) return "components." + component + ".use_stream = false: synchronous uploads";
    return "capacities.prefetch_depth = " + std::to_string(capacities.prefetch_depth);
}

nlohmann::json ComponentPlan::placement_json() const {
    return {{"prefetch", {{"depth", prefetch_depth()}, {"reason", prefetch_reason()}}},
            {"blocks_per_group", blocks_per_group},
            {"allocator_backend", placement.to_json()},
            {"allocator", {{"requested", allocator_requested}, {"used", allocator_name}}},
            {"allocator_options", allocator_options_report},
            {"device", placement.device().str()},
            {"transport", placement.cuda ? "cuda" : "cpu"}};
}

ComponentPlan make_plan(const ResolvedSettings & s, const std::string & component, const DevicePlacement & placement,
                        const ddo_allocator_vtable * allocator, const std::string & allocator_name,
                        const std::string & allocator_error) {
    ComponentPlan p;
    p.component = component;
    p.route = s.route(component);  // throws UsageError naming the known components
    p.route_source = s.at("components." + component + ".route").provenance.to_string();
    p.capacities = s.capacities(component);
    const std::string c = "components." + component + ".";
    if (auto v = s.get_optional<bool>(c + "use_stream")) p.use_stream = *v;
    if (auto v = s.get_optional<int>(c + "blocks_per_group")) p.blocks_per_group = *v;
    if (p.blocks_per_group != 1 && p.route != Route::group_block)
        throw UsageError(c + "blocks_per_group = " + std::to_string(p.blocks_per_group) + " (" +
                         s.at(c + "blocks_per_group").provenance.to_string() + ") groups blocks for route group_block, but " +
                         c + "route is '" + to_string(p.route) + "'; set " + c + "route=group_block or " + c +
                         "blocks_per_group=1");
    p.placement = placement;
    const auto vs = s.vae_strategy();
    p.vae_strategy = vs.kind;
    if (s.has("vae.strategy")) p.vae_strategy_source = s.at("vae.strategy").provenance.to_string();
    p.vae_tiles = {vs.tile_size, vs.tile_overlap, vs.temporal_frames};
    p.allocator_requested = p.capacities.allocator;
    p.allocator = allocator;
    p.allocator_name = allocator_name.empty() ? p.capacities.allocator : allocator_name;
    p.allocator_error = allocator_error;
    for (const auto & [key, v] : s.plugin_options(p.allocator_name)) {
        if (v.value.is_null()) continue;
        p.allocator_options.emplace_back(key, kv_string(v.value));
        p.allocator_options_report[key] = {{"value", p.allocator_options.back().second},
                                           {"source", v.provenance.to_string()}};
    }
    return p;
}

}  // namespace ddo::model
