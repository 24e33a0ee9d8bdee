// Reading a diffusers config.json into a typed config, one rule for every model's configs (the flow-match
// scheduler, qwen_image_21's transformer and VAE): a missing or null key keeps the reference's default; a value of
// the wrong type, or one this code does not implement, is a RuntimeError (exit 4) naming the file and the key, with
// the next step.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::model {

// j[key] into `out` when present and not null; RuntimeError naming `file` and `key` for a value of the wrong type.
template <class T>
void read_config_key(const nlohmann::json & j, const char * key, T & out, const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;  // diffusers default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                           "); fix the checkpoint's config or re-export it with diffusers");
    }
}

// RuntimeError "<file>: <what>; fix the checkpoint's config or re-export it" unless `ok`.
inline void require_config(bool ok, const std::filesystem::path & file, const std::string & what) {
    if (!ok) throw RuntimeError(file.string() + ": " + what + "; fix the checkpoint's config or re-export it");
}

}  // namespace ddo::model
