#include "ddo/plugin/plugin_search_path.hpp"

#include <sys/auxv.h>

#include <algorithm>
#include <cstdlib>

namespace ddo {

namespace fs = std::filesystem;

std::optional<std::string> plugin_path_from_environment() {
    // A setuid/setgid (or capability-raised) process must not let the caller pick code to load.
    if (::getauxval(AT_SECURE) != 0) return std::nullopt;
    const char * value = std::getenv("DDO_PLUGIN_PATH");
    if (value == nullptr) return std::nullopt;
    return std::string(value);
}

std::vector<fs::path> plugin_search_dirs(const fs::path & builtin_dir, const std::vector<fs::path> & cli_dirs,
                                         const std::optional<std::string> & env_plugin_path) {
    std::vector<fs::path> dirs;
    auto add = [&dirs](const fs::path & dir) {
        if (dir.empty()) return;
        fs::path normal = fs::absolute(dir).lexically_normal();
        if (normal.has_filename() == false && normal.has_parent_path()) normal = normal.parent_path();
        if (std::find(dirs.begin(), dirs.end(), normal) == dirs.end()) dirs.push_back(normal);
    };
    add(builtin_dir);
    for (const auto & dir : cli_dirs) add(dir);
    std::optional<std::string> env = env_plugin_path ? env_plugin_path : plugin_path_from_environment();
    if (env) {
        std::string::size_type start = 0;
        while (start <= env->size()) {
            std::string::size_type end = env->find(':', start);
            if (end == std::string::npos) end = env->size();
            add(fs::path(env->substr(start, end - start)));
            start = end + 1;
        }
    }
    return dirs;
}

}  // namespace ddo
