// Runs the built ddo-host once in a fresh directory (its --output and --report) and collects the exit code, the
// report, the console output, and whatever `inspect` reads from the directory before it is removed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddo::test {

struct HostRun {
    int exit_code = -1;
    nlohmann::json report;
    std::string log;
};

// `p` in single quotes, for a command line (a path without a quote in it).
inline std::string quoted(const std::filesystem::path & p) { return "'" + p.string() + "'"; }

// args: everything but --output/--report (quoted by the caller as needed).
inline HostRun run_ddo_host(const std::string & tag, const std::string & args,
                            const std::function<void(const std::filesystem::path & dir)> & inspect = {}) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("ddo_e2e_" + std::to_string(::getpid()) + "_" + tag);
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = std::string("'") + DDO_HOST_BIN + "' " + args + " --output '" + dir.string() +
                            "' --report '" + (dir / "report.json").string() + "' > '" + (dir / "log").string() + "' 2>&1";
    HostRun r;
    const int st = std::system(cmd.c_str());
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    std::ifstream log(dir / "log");
    r.log.assign(std::istreambuf_iterator<char>(log), {});
    std::ifstream in(dir / "report.json");
    if (in) r.report = nlohmann::json::parse(in);
    if (inspect) inspect(dir);
    fs::remove_all(dir);
    return r;
}

}  // namespace ddo::test
