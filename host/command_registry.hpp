// Self-registering ddo-host subcommands: one file per command family (cmd_plugins.cpp, ...).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace ddo::host {

// Options every command sees; filled by main.cpp before dispatch.
struct HostOptions {
    std::vector<std::filesystem::path> plugin_dirs;  // --plugin-dir (repeatable), then DDO_PLUGIN_PATH
    std::filesystem::path builtin_plugin_dir;        // <exe>/../lib/ddo/plugins
    std::filesystem::path preset_dir;                // <exe>/../share/ddo/presets (build and installed tree)
    std::string log_level = "info";
    int exit_code = 0;                               // a command sets it; main returns it
};

// A command family adds its subcommands (and callbacks) to the app.
using CommandInstaller = std::function<void(CLI::App & app, HostOptions & options)>;

struct CommandRegistry {
    static std::vector<std::pair<int, CommandInstaller>> & installers() {
        static std::vector<std::pair<int, CommandInstaller>> all;
        return all;
    }
};

// `static const ddo::host::RegisterCommand reg{10, install_fn};` in a cmd_*.cpp. Lower order first.
struct RegisterCommand {
    RegisterCommand(int order, CommandInstaller fn) { CommandRegistry::installers().emplace_back(order, std::move(fn)); }
};

}  // namespace ddo::host
