#include "ddo/preset/resolved_settings.hpp"

#include <algorithm>

#include "ddo/error.hpp"
#include "ddo/preset/preset_resolver.hpp"

namespace ddo {

const char * to_string(SettingLayer layer) {
    switch (layer) {
    case SettingLayer::builtin_default: return "default";
    case SettingLayer::preset: return "preset";
    case SettingLayer::environment: return "environment";
    case SettingLayer::command_line: return "--set";
    case SettingLayer::fit: return "fit";
    }
    return "?";
}

std::string Provenance::to_string() const {
    std::string s = ddo::to_string(layer);
    if (layer == SettingLayer::builtin_default || layer == SettingLayer::command_line) {
        if (layer == SettingLayer::command_line && !source.empty() && source != "--set") s += " " + source;
        return s;
    }
    s += " " + source;
    if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(column);
    return s;
}

nlohmann::json Provenance::to_json() const {
    nlohmann::json j{{"layer", ddo::to_string(layer)}, {"source", source}};
    if (line > 0) {
        j["line"] = line;
        j["column"] = column;
    }
    return j;
}

const char * to_string(HostRegistration r) {
    switch (r) {
    case HostRegistration::full: return "full";
    case HostRegistration::bounded: return "bounded";
    case HostRegistration::off: return "off";
    }
    return "?";
}
const char * to_string(AllocatorBackend b) {
    switch (b) {
    case AllocatorBackend::automatic: return "auto";
    case AllocatorBackend::host: return "host";
    case AllocatorBackend::cuda: return "cuda";
    }
    return "?";
}
const char * to_string(Selection s) {
    switch (s) {
    case Selection::first: return "first";
    case Selection::spread: return "spread";
    case Selection::largest: return "largest";
    }
    return "?";
}
const char * to_string(VaeStrategyKind k) {
    switch (k) {
    case VaeStrategyKind::resident: return "resident";
    case VaeStrategyKind::leaf_offload: return "leaf_offload";
    case VaeStrategyKind::tiled: return "tiled";
    case VaeStrategyKind::temporal_stream: return "temporal_stream";
    case VaeStrategyKind::automatic: return "auto";
    }
    return "?";
}

namespace {

template <class E, std::size_t N>
E parse_enum(const std::string & s, const E (&all)[N], E fallback) {
    for (E e : all)
        if (s == to_string(e)) return e;
    return fallback;
}

}  // namespace

Route ResolvedSettings::route(std::string_view component) const {
    std::string key = "components." + std::string(component) + ".route";
    if (!has(key)) {
        std::string list;
        for (const auto & c : components_) list += (list.empty() ? "" : ", ") + c;
        throw UsageError("no route resolved for component '" + std::string(component) + "' (known: " + list +
                         "); set components." + std::string(component) + ".route in the preset");
    }
    auto r = parse_route(get<std::string>(key));
    if (!r) throw UsageError("invalid route for component '" + std::string(component) + "'");
    return *r;
}

Capacities ResolvedSettings::capacities() const {
    Capacities c;
    auto num = [&](const char * k, double & out) {
        if (auto v = get_optional<double>(k)) out = *v;
    };
    auto integer = [&](const char * k, int & out) {
        if (auto v = get_optional<int>(k)) out = *v;
    };
    num("capacities.device_budget_gb", c.device_budget_gb);
    num("capacities.resident_budget_gb", c.resident_budget_gb);
    num("capacities.pinned_host_budget_gb", c.pinned_host_budget_gb);
    if (auto v = get_optional<bool>("capacities.pin_host_memory")) c.pin_host_memory = *v;
    num("capacities.ram_headroom_gb", c.ram_headroom_gb);
    integer("capacities.staging_slots", c.staging_slots);
    integer("capacities.prefetch_depth", c.prefetch_depth);
    num("capacities.host_registration_ceiling_gb", c.host_registration_ceiling_gb);
    if (auto v = get_optional<std::string>("capacities.host_registration"))
        c.host_registration = parse_enum(*v, {HostRegistration::full, HostRegistration::bounded, HostRegistration::off},
                                         HostRegistration::full);
    if (auto v = get_optional<std::string>("capacities.allocator")) c.allocator = *v;
    if (auto v = get_optional<std::string>("capacities.allocator_backend"))
        c.allocator_backend = parse_enum(*v, {AllocatorBackend::automatic, AllocatorBackend::host, AllocatorBackend::cuda},
                                         AllocatorBackend::automatic);
    if (auto v = get_optional<std::string>("planner.selection"))
        c.selection = parse_enum(*v, {Selection::first, Selection::spread, Selection::largest}, Selection::spread);
    return c;
}

Capacities ResolvedSettings::capacities(std::string_view component) const {
    Capacities c = capacities();
    std::string p = "components." + std::string(component) + ".";
    if (auto v = get_optional<double>(p + "resident_budget_gb")) c.resident_budget_gb = *v;
    if (auto v = get_optional<int>(p + "staging_slots")) c.staging_slots = *v;
    if (auto v = get_optional<int>(p + "prefetch_depth")) c.prefetch_depth = *v;
    if (auto v = get_optional<std::string>(p + "selection"))
        c.selection = parse_enum(*v, {Selection::first, Selection::spread, Selection::largest}, c.selection);
    return c;
}

VaeStrategy ResolvedSettings::vae_strategy() const {
    VaeStrategy v;
    if (auto s = get_optional<std::string>("vae.strategy"))
        v.kind = parse_enum(*s,
                            {VaeStrategyKind::resident, VaeStrategyKind::leaf_offload, VaeStrategyKind::tiled,
                             VaeStrategyKind::temporal_stream, VaeStrategyKind::automatic},
                            VaeStrategyKind::automatic);
    if (auto x = get_optional<int>("vae.tile_size")) v.tile_size = *x;
    if (auto x = get_optional<int>("vae.tile_overlap")) v.tile_overlap = *x;
    if (auto x = get_optional<int>("vae.temporal_frames")) v.temporal_frames = *x;
    return v;
}

bool ResolvedSettings::has(std::string_view key) const { return values_.find(key) != values_.end(); }

const ResolvedValue & ResolvedSettings::at(std::string_view key) const {
    auto it = values_.find(key);
    if (it == values_.end()) {
        std::vector<std::string> keys;
        for (const auto & [k, _] : values_) keys.push_back(k);
        auto hint = nearest(key, keys);
        throw UsageError("setting '" + std::string(key) + "' was not resolved" +
                         (hint.empty() ? std::string() : "; did you mean '" + hint + "'?") + " (docs/presets.md)");
    }
    return it->second;
}

std::map<std::string, ResolvedValue> ResolvedSettings::plugin_options(std::string_view plugin_name) const {
    std::map<std::string, ResolvedValue> out;
    std::string prefix = "plugin." + std::string(plugin_name) + ".";
    for (const auto & [k, v] : values_)
        if (k.starts_with(prefix)) out[k.substr(prefix.size())] = v;
    return out;
}

nlohmann::json ResolvedSettings::to_json() const {
    nlohmann::json j;
    const auto & p = preset_;
    auto null_if_empty = [](const std::string & s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    j["preset"] = {{"requested", null_if_empty(p.requested)},
                   {"effective", null_if_empty(p.effective)},
                   {"reason", p.reason},
                   {"description", null_if_empty(p.description)},
                   {"platform", p.platform},
                   {"platform_evidence", p.platform_evidence},
                   {"file", null_if_empty(p.file)},
                   {"file_sha256", null_if_empty(p.file_sha256)},
                   {"chain", p.chain},
                   {"chain_sha256", p.chain_sha256}};
    if (p.file.empty()) j["preset"]["file_sha256_reason"] = "no preset file (built-in defaults only)";
    nlohmann::json values = nlohmann::json::object();
    for (const auto & [k, v] : values_) values[k] = {{"value", v.value}, {"source", v.provenance.to_json()}};
    j["values"] = values;
    j["components"] = components_;
    nlohmann::json eff = nlohmann::json::object();
    for (const auto & c : components_) {
        auto cap = capacities(c);
        eff[c] = {{"route", has("components." + c + ".route") ? at("components." + c + ".route").value : nlohmann::json()},
                  {"resident_budget_gb", cap.resident_budget_gb},
                  {"staging_slots", cap.staging_slots},
                  {"prefetch_depth", cap.prefetch_depth},
                  {"selection", to_string(cap.selection)}};
    }
    j["effective_components"] = eff;
    return j;
}

}  // namespace ddo
