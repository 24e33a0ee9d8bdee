// A diffusers-layout checkpoint: model_index.json ({"_class_name", "<component>": [library, class]})
// and one directory per component.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ddo/store/weight_store.hpp"

namespace ddo::store {

struct ComponentEntry {
    std::string name;       // "transformer"
    std::string library;    // "diffusers"
    std::string class_name; // "QwenImageTransformer2DModel"
};

class DiffusersCheckpoint {
public:
    // Parses <dir>/model_index.json; throws RuntimeError naming the file on any malformation.
    static DiffusersCheckpoint open(const std::filesystem::path & dir);

    const std::filesystem::path & directory() const noexcept { return dir_; }
    const std::string & pipeline_class() const noexcept { return pipeline_class_; }
    const std::map<std::string, ComponentEntry> & components() const noexcept { return components_; }
    const nlohmann::json & model_index() const noexcept { return index_; }
    // Opens <dir>/<name> as a WeightStore; throws UsageError for a name not in model_index.json.
    WeightStore open_component(std::string_view name) const;
    // <dir>/<name>/config.json (throws RuntimeError when missing or malformed).
    nlohmann::json component_config(std::string_view name) const;

private:
    std::filesystem::path dir_;
    std::string pipeline_class_;
    std::map<std::string, ComponentEntry> components_;
    nlohmann::json index_;
};

// Reads and parses a JSON file; throws RuntimeError naming the file (and the parse position).
nlohmann::json read_json_file(const std::filesystem::path & path);

}  // namespace ddo::store
