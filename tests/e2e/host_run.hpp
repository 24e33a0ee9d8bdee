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
#include <vector>

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

// Issue 40 item 5: every component of the plugin ends a finished run used (an executed route) or not used with its
// reason (routes.<c>.used false, executed_reason "not used: ..."), never "the plugin did not report an executed route".
// Returns the components found not used, for the caller to check which.
inline std::vector<std::string> every_route_reported(const nlohmann::json & report, std::string * problems) {
    std::vector<std::string> unused;
    if (!report.is_object() || !report.contains("routes")) {
        *problems += "no routes in the report; ";
        return unused;
    }
    for (const auto & [c, e] : report.at("routes").items()) {
        const auto used = e.value("used", nlohmann::json());
        if (used == nlohmann::json(true) && !e.at("executed").is_null()) continue;
        const auto reason = e.value("executed_reason", nlohmann::json());
        if (used == nlohmann::json(false) && reason.is_string() && reason.get<std::string>().rfind("not used: ", 0) == 0 &&
            reason.get<std::string>().size() > 12) {
            unused.push_back(c);
            continue;
        }
        *problems += c + ": " + e.dump() + "; ";
    }
    return unused;
}

}  // namespace ddo::test
