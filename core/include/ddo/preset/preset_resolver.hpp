// Preset resolution: built-in defaults < preset (< its `inherits` parents) < DDO_* environment
// < --set key=value; a component's own keys beat the global ones (ResolvedSettings::capacities).
// Every failure throws ddo::PresetError (a UsageError, exit 2) naming file:line:col, the key and
// a hint; nothing has run at that point. Rules: docs/presets.md, docs/architecture.md
// "Presets and resolution".
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"

namespace ddo {

enum class Platform { linux_native, wsl, other };
const char * to_string(Platform p);  // "linux" | "wsl" | "other"

struct PlatformInfo {
    Platform platform = Platform::other;
    std::string evidence;  // what the decision was based on
};

// Detects native Linux vs WSL from <proc_root>/sys/kernel/osrelease (and /proc/version).
// Tests pass a fake root or inject a PlatformInfo into ResolveRequest instead.
PlatformInfo detect_platform(const std::filesystem::path & proc_root = "/proc");

// A preset/configuration error with its location. what() is the full one-line message:
// "<file>:<line>:<col>: <problem>; <hint>".
class PresetError : public UsageError {
public:
    PresetError(std::string file, int line, int column, std::string problem, std::string hint);
    const std::string & file() const { return file_; }
    int line() const { return line_; }
    int column() const { return column_; }
    const std::string & problem() const { return problem_; }
    const std::string & hint() const { return hint_; }

private:
    std::string file_;
    int line_, column_;
    std::string problem_, hint_;
};

struct ResolveRequest {
    // A preset name ("low_ram_safe"), a file name ("low_ram_safe.toml") looked up in preset_dirs,
    // or a path. Empty: built-in defaults only.
    std::string preset;
    std::vector<std::filesystem::path> preset_dirs;
    std::vector<std::string> sets;                   // "key=value", in command-line order
    std::map<std::string, std::string> environment;  // DDO_* variables (current_environment())
    std::optional<PlatformInfo> platform;            // injected; detect_platform() when empty
    std::filesystem::path proc_root = "/proc";       // for detect_platform
    // The chosen model plugin, when known: its components and supported_options patterns. With a
    // plugin, plugin.<plugin_name>.* keys are checked against the patterns ("*" suffix allowed;
    // a pattern may be written with or without the "plugin." prefix); keys of other plugins'
    // tables are kept but not checked. Without a plugin, plugin tables are kept unchecked.
    std::string plugin_name;
    std::optional<std::vector<std::string>> plugin_components;
    std::optional<std::vector<std::string>> supported_options;
    // Every plugin name the host found (model and allocator, verified or not). When given, a plugin.<name> table
    // whose <name> is none of them is refused with the nearest name (a typo, or a plugin that is not installed).
    std::optional<std::vector<std::string>> known_plugins;
};

ResolvedSettings resolve_settings(const ResolveRequest & request);

// Every error of a preset file, in file:line:column order: each key is checked on its own (unknown key, type,
// range, component, plugin table), then — when the keys are clean — the resolution (inherits, cross-key rules).
// A syntax error is the only error of its file (TOML cannot be read past it). Empty: the file is clean.
std::vector<PresetError> lint_preset_file(const std::filesystem::path & file, const std::vector<std::filesystem::path> & preset_dirs);

// Lints a preset file without a plugin (syntax, keys, types, ranges, inherits). Throws PresetError.
void check_preset_file(const std::filesystem::path & file, const std::vector<std::filesystem::path> & preset_dirs);

// Finds a preset by name, file name or path. Throws PresetError (missing file) naming the
// directories searched and the nearest preset name.
std::filesystem::path find_preset(const std::string & name_or_path,
                                  const std::vector<std::filesystem::path> & preset_dirs);

// DDO_* variables of this process.
std::map<std::string, std::string> current_environment();

// Levenshtein distance, and the nearest candidate within a sensible distance ("" when none).
std::size_t edit_distance(std::string_view a, std::string_view b);
std::string nearest(std::string_view word, const std::vector<std::string> & candidates);

}  // namespace ddo
