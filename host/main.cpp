// ddo-host: parse the command line, dispatch to a registered command, map failures to exit codes.
// Exit codes (README): 0 ok, 2 usage/config, 3 artifact verification, 4 runtime, 130 interrupted.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "command_registry.hpp"
#include "run_signals.hpp"
#include "ddo/build_info.h"
#include "ddo/error.hpp"

namespace fs = std::filesystem;

namespace {

fs::path executable_dir() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}

}  // namespace

int main(int argc, char ** argv) {
    using namespace ddo::host;
    install_run_signals();  // before anything else: a signal in the first milliseconds still leaves a report
    CLI::App app{"ddo-host: runs large diffusion models on one GPU by streaming weights"};
    app.set_version_flag("--version", std::string(DDO_VERSION_STRING) + " (" + DDO_GIT_REVISION + ")");
    app.footer(R"(Examples:
  ddo-host --plugin qwen_image --preset low_ram_safe --model CKPT -p "a cat on a mat" -o cat.png
  ddo-host --plugin qwen_image --model CKPT -p "a cat" -n "blurry" --steps 20 --cfg-scale 4 --seed -1
  ddo-host encode --plugin qwen_image --model CKPT -p "a cat" -o E.safetensors   # encode once, then --prompt-embeds E.safetensors
  ddo-host --plugin qwen_image --model CKPT -p "a cat" --dry-run   # plan, load checks only
  ddo-host serve --plugin qwen_image --model CKPT   # HTTP job + OpenAI images API on 127.0.0.1:8188 (README, "Serving")
  ddo-host plugins              ddo-host preset show low_ram_safe      ddo-host report summarize ddo_report.json
Exit codes: 0 ok, 1 preset diff differs, 2 usage (nothing ran), 3 plugin verification, 4 runtime, 130 SIGINT.
Presets: docs/presets.md. Report fields: docs/metrics.md.)");
    app.require_subcommand(0, 1);

    HostOptions options;
    options.builtin_plugin_dir = fs::weakly_canonical(executable_dir() / DDO_DEFAULT_PLUGIN_DIR_REL);
    options.preset_dir = fs::weakly_canonical(executable_dir() / DDO_DEFAULT_PRESET_DIR_REL);
    app.add_option("--plugin-dir", options.plugin_dirs,
                   "extra plugin directory with its own artifacts.toml (repeatable; also DDO_PLUGIN_PATH)");
    // Applied as soon as it is parsed (before any command runs): -v = debug, -q = warnings and errors only.
    const auto set_level = [&options](const std::string & level) {
        options.log_level = level;
        spdlog::set_level(spdlog::level::from_str(level));
    };
    app.add_option("--log-level", options.log_level, "trace|debug|info|warn|error")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
        ->each(set_level)
        ->capture_default_str();
    app.add_flag_callback("-v,--verbose", [set_level] { set_level("debug"); }, "more output: --log-level debug");
    app.add_flag_callback("-q,--quiet", [set_level] { set_level("warn"); }, "warnings and errors only: --log-level warn");

    auto & installers = CommandRegistry::installers();
    std::stable_sort(installers.begin(), installers.end(),
                     [](const auto & a, const auto & b) { return a.first < b.first; });
    for (auto & [order, install] : installers) install(app, options);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : static_cast<int>(ddo::ExitCode::usage);
    } catch (const ddo::Error & e) {
        spdlog::error("{}", e.what());
        return static_cast<int>(e.code());
    } catch (const std::exception & e) {
        spdlog::error("internal error: {}", e.what());
        return static_cast<int>(ddo::ExitCode::runtime);
    }
    return options.exit_code;
}
