#include "ddo/store/diffusers_checkpoint.hpp"

#include <fstream>
#include <sstream>

#include "ddo/error.hpp"

namespace ddo::store {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw RuntimeError("cannot open " + path.string() + "; check the checkpoint layout");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    if (text.size() > (64u << 20)) throw RuntimeError(path.string() + " is larger than 64 MiB; not a config file");
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError("cannot parse " + path.string() + ": " + e.what() + "; re-download the checkpoint");
    }
}

DiffusersCheckpoint DiffusersCheckpoint::open(const fs::path & dir) {
    DiffusersCheckpoint c;
    c.dir_ = dir;
    const fs::path p = dir / "model_index.json";
    if (!fs::exists(p)) throw RuntimeError(p.string() + " is missing; model_dir must be a diffusers-layout checkpoint");
    c.index_ = read_json_file(p);
    if (!c.index_.is_object()) throw RuntimeError(p.string() + " is not a JSON object");
    if (auto it = c.index_.find("_class_name"); it != c.index_.end() && it->is_string())
        c.pipeline_class_ = it->get<std::string>();
    for (auto it = c.index_.begin(); it != c.index_.end(); ++it) {
        if (it.key().starts_with("_")) continue;
        const auto & v = it.value();
        if (!v.is_array() || v.size() != 2) continue;  // scalar pipeline options (e.g. "requires_safety_checker")
        if (v[0].is_null() || v[1].is_null()) continue;  // optional component left out
        if (!v[0].is_string() || !v[1].is_string())
            throw RuntimeError(p.string() + ": component '" + it.key() + "' is not [library, class]");
        const std::string & name = it.key();
        if (name.find('/') != std::string::npos || name == "." || name == "..")
            throw RuntimeError(p.string() + ": component name '" + name + "' is not a plain directory name");
        c.components_[name] = ComponentEntry{name, v[0].get<std::string>(), v[1].get<std::string>()};
    }
    return c;
}

WeightStore DiffusersCheckpoint::open_component(std::string_view name) const {
    if (!components_.count(std::string(name)))
        throw UsageError("component '" + std::string(name) + "' is not listed in " + (dir_ / "model_index.json").string());
    return WeightStore::open_component(dir_ / std::string(name));
}

nlohmann::json DiffusersCheckpoint::component_config(std::string_view name) const {
    return read_json_file(dir_ / std::string(name) / "config.json");
}

}  // namespace ddo::store
