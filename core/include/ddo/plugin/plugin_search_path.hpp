// Where plugins are looked for: the builtin directory (<exe>/../lib/ddo/plugins), then each
// --plugin-dir in order, then each entry of DDO_PLUGIN_PATH (colon-separated). DDO_PLUGIN_PATH is
// ignored in a privileged process (getauxval(AT_SECURE), e.g. setuid), as Vulkan's loader does.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ddo {

// env_plugin_path: the value of DDO_PLUGIN_PATH; by default read from the environment.
// Empty entries are skipped; a directory listed twice is kept once (first position).
std::vector<std::filesystem::path> plugin_search_dirs(
    const std::filesystem::path & builtin_dir, const std::vector<std::filesystem::path> & cli_dirs,
    const std::optional<std::string> & env_plugin_path = std::nullopt);

// The value of DDO_PLUGIN_PATH, or nullopt when unset or when the process runs with AT_SECURE.
std::optional<std::string> plugin_path_from_environment();

}  // namespace ddo
