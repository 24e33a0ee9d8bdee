// ddo::ResolvedSettings: the preset after every layer was applied, each value with its provenance.
// Built by ddo::resolve_settings (ddo/preset/preset_resolver.hpp); read by the host, the engine
// and model plugins. Keys are dotted paths of the schema (docs/presets.md), e.g.
// "capacities.resident_budget_gb", "components.transformer.route", "plugin.qwen_image_21.cfg".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/engine/route.hpp"

namespace ddo {

// Where a resolved value came from. Lowest first; a higher layer beats every lower one.
enum class SettingLayer {
    builtin_default = 0,  // the schema's default (docs/presets.md)
    preset = 1,           // a preset file or one of its `inherits` parents (child beats parent)
    environment = 2,      // a DDO_* environment variable
    command_line = 3,     // --set key=value
    fit = 4,              // fit.policy = auto changed it (a ModelRun's fitted settings; Note [Fitting a run])
};
const char * to_string(SettingLayer layer);

struct Provenance {
    SettingLayer layer = SettingLayer::builtin_default;
    std::string source;  // preset file path, variable name ("DDO_..."), "--set", or "default"
    int line = 0;        // 1-based, 0 when not from a file
    int column = 0;
    std::string to_string() const;  // "preset /p/low_ram_safe.toml:12:1", "environment DDO_X", ...
    nlohmann::json to_json() const;
};

struct ResolvedValue {
    nlohmann::json value;  // null = unset (e.g. a per-component override nobody set)
    Provenance provenance;
};

// Canonical route vocabulary (design.md §4), one for every model.
using engine::Route;  // ddo/engine/route.hpp: one route vocabulary for presets and the engine
using engine::to_string;
using engine::parse_route;
enum class HostRegistration { full, bounded, off };
enum class AllocatorBackend { automatic, host, cuda };  // preset spelling: auto | host | cuda
enum class Selection { first, spread, largest };
enum class VaeStrategyKind { resident, leaf_offload, tiled, temporal_stream, automatic };  // `auto`

const char * to_string(HostRegistration r);
const char * to_string(AllocatorBackend b);
const char * to_string(Selection s);
const char * to_string(VaeStrategyKind k);

// Capacities. A *_gb value of 0 means "auto" (decided by the engine from detected memory), never
// "none"; see docs/presets.md for each key.
struct Capacities {
    double device_budget_gb = 0;          // capacities.device_budget_gb
    double resident_budget_gb = 0;        // capacities.resident_budget_gb (or the component's override)
    double pinned_host_budget_gb = 0;     // capacities.pinned_host_budget_gb
    bool pin_host_memory = true;          // capacities.pin_host_memory (false: no pinned allocations at all)
    double ram_headroom_gb = 6;           // capacities.ram_headroom_gb
    int staging_slots = 2;                // capacities.staging_slots (or the component's override)
    int prefetch_depth = 1;               // capacities.prefetch_depth (or the component's override)
    HostRegistration host_registration = HostRegistration::full;
    double host_registration_ceiling_gb = 0;  // used when host_registration == bounded (> 0 then)
    std::string allocator = "auto";       // allocator plugin name; "auto" = the first verified one
    AllocatorBackend allocator_backend = AllocatorBackend::automatic;
    Selection selection = Selection::spread;  // planner.selection (or the component's override)

    static std::uint64_t gib_to_bytes(double gib) { return static_cast<std::uint64_t>(gib * 1073741824.0); }
};

struct VaeStrategy {
    VaeStrategyKind kind = VaeStrategyKind::automatic;
    int tile_size = 512;      // pixels, used by `tiled`
    int tile_overlap = 64;    // pixels, used by `tiled`
    int temporal_frames = 16; // frames per window, used by `temporal_stream`
};

// The preset the user asked for and what it resolved to.
struct PresetIdentity {
    std::string requested;              // as given: "auto", "low_ram_safe", "./my.toml"
    std::string effective;              // after `auto`: e.g. "wsl_compat"; empty = defaults only
    std::string description;            // the requested preset's `description`
    std::string reason;                 // why effective differs (or "as requested")
    std::string platform;               // linux | wsl | other (as detected or injected)
    std::string platform_evidence;      // e.g. "/proc/sys/kernel/osrelease contains 'microsoft'"
    std::string file;                   // the requested preset file (absolute), empty if none
    std::string file_sha256;            // sha256 of that file's bytes
    std::vector<std::string> chain;     // every file read, requested first, then parents
    std::vector<std::string> chain_sha256;
};

class ResolvedSettings {
public:
    ResolvedSettings() = default;

    // Route of a component. Throws UsageError naming the known components when unknown.
    Route route(std::string_view component) const;
    // Components this resolution covers (the plugin's list, or defaults + those a layer mentions).
    const std::vector<std::string> & components() const { return components_; }

    // Global capacities, and with a component's own overrides (components.<c>.resident_budget_gb,
    // .staging_slots, .prefetch_depth, .selection) applied: per-component beats global.
    Capacities capacities() const;
    Capacities capacities(std::string_view component) const;
    VaeStrategy vae_strategy() const;

    bool has(std::string_view key) const;
    // Throws UsageError when the key was never resolved (names the nearest key).
    const ResolvedValue & at(std::string_view key) const;
    template <class T> T get(std::string_view key) const { return at(key).value.template get<T>(); }
    template <class T> std::optional<T> get_optional(std::string_view key) const {
        if (!has(key)) return std::nullopt;
        const auto & v = at(key).value;
        if (v.is_null()) return std::nullopt;
        return v.template get<T>();
    }

    // Options under plugin.<plugin_name>. (keys returned without the "plugin.<name>." prefix).
    std::map<std::string, ResolvedValue> plugin_options(std::string_view plugin_name) const;
    const std::map<std::string, ResolvedValue, std::less<>> & values() const { return values_; }
    const PresetIdentity & preset() const { return preset_; }

    // {"preset": {...identity...}, "values": {key: {"value": v, "source": {...}}},
    //  "effective_capacities": {component: {...}}}
    nlohmann::json to_json() const;

    // Used by the resolver.
    void set(std::string key, ResolvedValue v) { values_[std::move(key)] = std::move(v); }
    void set_components(std::vector<std::string> c) { components_ = std::move(c); }
    PresetIdentity & mutable_preset() { return preset_; }

private:
    std::map<std::string, ResolvedValue, std::less<>> values_;
    std::vector<std::string> components_;
    PresetIdentity preset_;
};

}  // namespace ddo
