#include "ddo/model/component_plan.hpp"

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

// A preset value as the string an allocator plugin's ddo_kv carries: strings as they are, booleans true/false,
// numbers in JSON notation, arrays and tables as JSON.
std::string kv_string(const nlohmann::json & v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

nlohmann::json ComponentPlan::placement_json() const {
    return {{"allocator_backend", placement.to_json()},
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
    p.placement = placement;
    const auto vs = s.vae_strategy();
    p.vae_strategy = vs.kind;
    if (s.has("vae.strategy")) p.vae_strategy_source = s.at("vae.strategy").provenance.to_string();
    p.vae_tiles = {vs.tile_size, vs.tile_overlap};
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
