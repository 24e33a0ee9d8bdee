// Preset schema v1: every key, its type, range, default and which plugins support it.
// docs/presets.md documents the same table (a test keeps them in step).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo {

// number_list: a TOML array of numbers (each within min..max); --set takes "[a, b]" or "a,b".
enum class KeyType { boolean, integer, number, string, enumeration, string_or_list, number_list };
const char * to_string(KeyType t);

struct KeyDef {
    std::string key;                    // dotted; "components.*.route": * is a component name
    KeyType type = KeyType::string;
    std::optional<double> min, max;     // integer / number ranges (inclusive)
    std::vector<std::string> choices;   // enumeration
    nlohmann::json default_value;       // null = unset (the plugin or engine decides; see doc)
    std::string doc;
    std::string supported_by = "all model plugins";
};

constexpr int kPresetSchemaVersion = 1;

const std::vector<KeyDef> & preset_schema();
// Components known without a plugin (a plugin's own list is accepted in addition).
const std::vector<std::string> & known_components();
// The definition for a concrete key ("components.vae.route" matches "components.*.route").
// Sets *component to the component name when the key is per-component.
const KeyDef * find_key(std::string_view key, std::string * component = nullptr);
// Every concrete key name usable for hints, with * expanded over `components`.
std::vector<std::string> concrete_keys(const std::vector<std::string> & components);
// DDO_* variable for a concrete key: "capacities.resident_budget_gb" -> DDO_CAPACITIES_RESIDENT_BUDGET_GB;
// "components.transformer.route" -> DDO_TRANSFORMER_ROUTE (component keys drop "components.").
std::string env_name_for(std::string_view key);

}  // namespace ddo
