// Linux admission (see ddo/platform/linux_admission.hpp and Note [Linux admission]).
#include "ddo/platform/linux_admission.hpp"

#include <cstdlib>

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddo/util/format_bytes.hpp"
#include "proc_text.hpp"

namespace ddo::platform {
namespace {

namespace fs = std::filesystem;

// v1 reports "no limit" as PAGE_COUNTER_MAX pages (0x7FFFFFFFFFFFF000 on 4 KiB pages).
constexpr std::uint64_t kV1Unlimited = 1ull << 62;

std::optional<std::uint64_t> default_rlimit(int resource, std::string * error) {
    rlimit rl{};
    if (::getrlimit(resource, &rl) != 0) {
        *error = std::string("getrlimit failed: ") + std::strerror(errno);
        return std::nullopt;
    }
    if (rl.rlim_cur == RLIM_INFINITY) {
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(rl.rlim_cur);
}

Observation rlimit_observation(const RlimitReader & reader, int resource, const char * name) {
    std::string error;
    auto v = reader(resource, &error);
    if (!error.empty()) {
        return Observation::unknown_value(name, error);
    }
    return v ? Observation::known_value(*v, name) : Observation::unlimited_value(name);
}

Observation kb_observation(const std::optional<std::string> & text, const std::string & file_error, const fs::path & file,
                           const char * key) {
    const std::string source = file.string() + " " + key;
    if (!text) {
        return Observation::unknown_value(source, file_error);
    }
    auto v = find_kb_field(*text, key);
    if (!v) {
        return Observation::unknown_value(source, std::string("no readable '") + key + ":' line in " + file.string());
    }
    return Observation::known_value(*v, source);
}

// A limit file's value: "max" -> unlimited; a number (v1: >= 2^62 -> unlimited).
Observation limit_file(const fs::path & file) {
    std::string error;
    auto line = read_first_line(file, &error);
    if (!line) {
        return Observation::unknown_value(file.string(), error);
    }
    if (*line == "max") {
        return Observation::unlimited_value(file.string());
    }
    auto v = parse_decimal(*line);
    if (!v) {
        return Observation::unknown_value(file.string(), "unexpected content '" + *line + "' in " + file.string());
    }
    return *v >= kV1Unlimited ? Observation::unlimited_value(file.string()) : Observation::known_value(*v, file.string());
}

Observation usage_file(const fs::path & file) {
    std::string error;
    auto line = read_first_line(file, &error);
    if (!line) {
        return Observation::unknown_value(file.string(), error);
    }
    auto v = parse_decimal(*line);
    return v ? Observation::known_value(*v, file.string())
             : Observation::unknown_value(file.string(), "unexpected content '" + *line + "' in " + file.string());
}

bool contains_word(const std::string & list, std::string_view word, char sep) {
    std::string_view rest = list;
    while (!rest.empty()) {
        const auto end = rest.find(sep);
        const std::string_view item = rest.substr(0, end);
        if (item == word) {
            return true;
        }
        if (end == std::string_view::npos) {
            break;
        }
        rest = rest.substr(end + 1);
    }
    return false;
}

// From the process's cgroup directory up to the mount root: the level with the least room binds.
void observe_cgroup_levels(const fs::path & mount, const std::string & rel_path, const char * limit_name,
                           const char * usage_name, LinuxObservations * obs) {
    fs::path leaf = mount / fs::path(rel_path).relative_path();
    std::error_code ec;
    std::string note;
    if (!fs::is_directory(leaf, ec)) {
        // The path in /proc/self/cgroup is not visible (cgroup namespace or v1 without cgroupns):
        // the mount root is this container's cgroup.
        note = " (cgroup path " + rel_path + " not visible; using the mount root)";
        leaf = mount;
    }
    bool have_finite = false;
    std::uint64_t best_room = UINT64_MAX;
    for (fs::path dir = leaf;; dir = dir.parent_path()) {
        const fs::path limit_path = dir / limit_name;
        if (fs::exists(fs::symlink_status(limit_path, ec))) {
            Observation limit = limit_file(limit_path);
            if (limit.is_unknown()) {
                obs->cgroup_path = dir.string();
                obs->cgroup_memory_max = limit;
                obs->cgroup_memory_current = Observation::unknown_value((dir / usage_name).string(), "not read: the limit is unknown");
                return;
            }
            if (limit.is_known()) {
                Observation usage = usage_file(dir / usage_name);
                if (usage.is_unknown()) {
                    obs->cgroup_path = dir.string();
                    obs->cgroup_memory_max = limit;
                    obs->cgroup_memory_current = usage;
                    return;
                }
                const std::uint64_t room = limit.value > usage.value ? limit.value - usage.value : 0;
                if (!have_finite || room < best_room) {
                    have_finite = true;
                    best_room = room;
                    obs->cgroup_path = dir.string();
                    obs->cgroup_memory_max = limit;
                    obs->cgroup_memory_current = usage;
                }
            }
        }
        if (dir == mount || dir == dir.parent_path() || dir.string().size() <= mount.string().size()) {
            break;
        }
    }
    if (!have_finite) {
        obs->cgroup_path = leaf.string();
        obs->cgroup_memory_max = Observation::unlimited_value(leaf.string() + "/" + limit_name + note +
                                                              " (no finite limit from here to the mount root)");
        obs->cgroup_memory_current = usage_file(leaf / usage_name);
        if (obs->cgroup_memory_current.is_unknown()) {
            // Without a limit the usage does not gate growth; keep it as an observation only.
            obs->cgroup_memory_current.error += " (informational: no finite limit applies)";
        }
    } else {
        obs->cgroup_memory_max.source += note;
    }
}

void observe_cgroup(const AdmissionRoots & roots, LinuxObservations * obs) {
    const fs::path self_cgroup = roots.proc / "self" / "cgroup";
    std::string error;
    auto text = read_text_file(self_cgroup, &error);
    if (!text) {
        obs->cgroup_version = "unknown";
        obs->cgroup_memory_max = Observation::unknown_value(self_cgroup.string(), error);
        obs->cgroup_memory_current = Observation::unknown_value(self_cgroup.string(), error);
        return;
    }
    std::optional<std::string> v2_path;
    std::optional<std::string> v1_memory_path;
    std::istringstream lines(*text);
    for (std::string line; std::getline(lines, line);) {
        const auto a = line.find(':');
        const auto b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) {
            continue;
        }
        const std::string id = line.substr(0, a);
        const std::string controllers = line.substr(a + 1, b - a - 1);
        const std::string path = line.substr(b + 1);
        if (id == "0" && controllers.empty()) {
            v2_path = path;
        } else if (contains_word(controllers, "memory", ',')) {
            v1_memory_path = path;
        }
    }
    const fs::path cgroup_fs = roots.sys / "fs" / "cgroup";
    std::error_code ec;
    if (v2_path) {
        for (const fs::path & mount : {cgroup_fs, cgroup_fs / "unified"}) {
            std::string ignored;
            auto controllers = read_first_line(mount / "cgroup.controllers", &ignored);
            if (controllers && contains_word(*controllers, "memory", ' ')) {
                obs->cgroup_version = "v2";
                observe_cgroup_levels(mount, *v2_path, "memory.max", "memory.current", obs);
                return;
            }
        }
    }
    if (v1_memory_path) {
        const fs::path mount = cgroup_fs / "memory";
        if (!fs::is_directory(mount, ec)) {
            obs->cgroup_version = "unknown";
            const std::string why = "the memory controller is listed in " + self_cgroup.string() + " (v1 path " +
                                    *v1_memory_path + ") but " + mount.string() + " is not mounted";
            obs->cgroup_memory_max = Observation::unknown_value(mount.string(), why);
            obs->cgroup_memory_current = Observation::unknown_value(mount.string(), why);
            return;
        }
        obs->cgroup_version = "v1";
        observe_cgroup_levels(mount, *v1_memory_path, "memory.limit_in_bytes", "memory.usage_in_bytes", obs);
        return;
    }
    obs->cgroup_version = "none";
    obs->cgroup_memory_max = Observation::unlimited_value(self_cgroup.string() + " (no memory cgroup controller)");
    obs->cgroup_memory_current = Observation::unlimited_value(self_cgroup.string() + " (no memory cgroup controller)");
}

const char * state_name(Observation::State s) {
    switch (s) {
    case Observation::State::known: return "known";
    case Observation::State::unlimited: return "unlimited";
    case Observation::State::unknown: return "unknown";
    }
    return "unknown";
}

}  // namespace

Observation Observation::known_value(std::uint64_t v, std::string source) {
    return {State::known, v, std::move(source), {}};
}
Observation Observation::unlimited_value(std::string source) { return {State::unlimited, 0, std::move(source), {}}; }
Observation Observation::unknown_value(std::string source, std::string error) {
    return {State::unknown, 0, std::move(source), std::move(error)};
}

nlohmann::json Observation::to_json() const {
    nlohmann::json j = {{"state", state_name(state)}, {"source", source}};
    if (state == State::known) {
        j["value"] = value;
    } else {
        j["value"] = nullptr;  // unlimited or unknown: never 0
    }
    if (!error.empty()) {
        j["error"] = error;
    }
    return j;
}

nlohmann::json LinuxObservations::to_json() const {
    return {{"overcommit_mode", overcommit_mode.to_json()},
            {"commit_limit", commit_limit.to_json()},
            {"committed_as", committed_as.to_json()},
            {"mem_available", mem_available.to_json()},
            {"cgroup", {{"version", cgroup_version},
                        {"path", cgroup_path},
                        {"memory_max", cgroup_memory_max.to_json()},
                        {"memory_current", cgroup_memory_current.to_json()}}},
            {"rlimit_memlock", rlimit_memlock.to_json()},
            {"rlimit_as", rlimit_as.to_json()},
            {"vm_locked", vm_locked.to_json()},
            {"vm_size", vm_size.to_json()}};
}

nlohmann::json AdmissionDecision::to_json() const {
    return {{"admitted", admitted}, {"reason", reason}, {"checks", checks}};
}

AdmissionRoots AdmissionRoots::of_process() {
    AdmissionRoots r;
    if (const char * dir = std::getenv("DDO_ADMISSION_ROOT"); dir && *dir) {
        r.proc = fs::path(dir) / "proc";
        r.sys = fs::path(dir) / "sys";
    }
    return r;
}

LinuxAdmission::LinuxAdmission(AdmissionRoots roots, RlimitReader rlimits)
    : roots_(std::move(roots)), rlimits_(rlimits ? std::move(rlimits) : RlimitReader(default_rlimit)) {}

LinuxObservations LinuxAdmission::observe() const {
    LinuxObservations obs;
    const fs::path overcommit = roots_.proc / "sys" / "vm" / "overcommit_memory";
    std::string error;
    if (auto line = read_first_line(overcommit, &error)) {
        auto mode = parse_decimal(*line);
        obs.overcommit_mode = mode && *mode <= 2
                                  ? Observation::known_value(*mode, overcommit.string())
                                  : Observation::unknown_value(overcommit.string(), "unexpected content '" + *line + "'");
    } else {
        obs.overcommit_mode = Observation::unknown_value(overcommit.string(), error);
    }
    const fs::path meminfo = roots_.proc / "meminfo";
    std::string meminfo_error;
    const auto meminfo_text = read_text_file(meminfo, &meminfo_error);
    obs.commit_limit = kb_observation(meminfo_text, meminfo_error, meminfo, "CommitLimit");
    obs.committed_as = kb_observation(meminfo_text, meminfo_error, meminfo, "Committed_AS");
    obs.mem_available = kb_observation(meminfo_text, meminfo_error, meminfo, "MemAvailable");
    const fs::path status = roots_.proc / "self" / "status";
    std::string status_error;
    const auto status_text = read_text_file(status, &status_error);
    obs.vm_locked = kb_observation(status_text, status_error, status, "VmLck");
    obs.vm_size = kb_observation(status_text, status_error, status, "VmSize");
    observe_cgroup(roots_, &obs);
    obs.rlimit_memlock = rlimit_observation(rlimits_, RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK");
    obs.rlimit_as = rlimit_observation(rlimits_, RLIMIT_AS, "RLIMIT_AS");
    return obs;
}

std::string lower_locked_hint(GrowthRoute route) {
    switch (route) {
    case GrowthRoute::pinned:
        return "lower capacities.pinned_host_budget_gb or set capacities.pin_host_memory = false (no pinned allocations)";
    case GrowthRoute::registration:
        return "use capacities.host_registration = \"bounded\" with a lower capacities.host_registration_ceiling_gb, or \"off\"";
    case GrowthRoute::unspecified: break;
    }
    return "lower the page-locked host memory asked for (pinned: capacities.pinned_host_budget_gb or pin_host_memory = "
           "false; registration: capacities.host_registration = \"bounded\" with a lower ceiling, or \"off\")";
}

AdmissionDecision LinuxAdmission::admit(const GrowthRequest & request) const { return decide(observe(), request); }

AdmissionDecision LinuxAdmission::decide(const LinuxObservations & obs, const GrowthRequest & request) {
    AdmissionDecision d;
    const std::string what = request.what.empty() ? std::string("growth") : request.what;
    const std::string asked = what + " of " + format_mib(request.bytes);
    auto refuse = [&](const std::string & why) {
        d.admitted = false;
        d.reason = asked + " refused: " + why;
        d.checks.push_back("refused: " + why);
        return d;
    };
    auto unknown = [&](const char * name, const Observation & o) {
        return refuse(std::string(name) + " is unknown (" + o.error + "); unknown observations refuse growth: make " +
                      o.source + " readable or run where it exists");
    };

    // Physical: MemAvailable minus the requested headroom.
    if (obs.mem_available.is_unknown()) {
        return unknown("MemAvailable", obs.mem_available);
    }
    if (request.bytes + request.headroom > obs.mem_available.value) {
        return refuse("MemAvailable is " + format_mib(obs.mem_available.value) + ", below the request plus " +
                      format_mib(request.headroom) + " headroom; free memory, or " +
                      (request.route == GrowthRoute::unspecified ? std::string("lower the pinned/resident budgets")
                                                                 : lower_locked_hint(request.route)));
    }
    d.checks.push_back("MemAvailable " + format_mib(obs.mem_available.value) + " >= request + headroom");

    // Commit accounting: enforced by the kernel in mode 2 only, so we refuse what it would refuse.
    if (obs.overcommit_mode.is_unknown()) {
        return unknown("vm.overcommit_memory", obs.overcommit_mode);
    }
    if (obs.overcommit_mode.value == 2) {
        if (obs.commit_limit.is_unknown()) {
            return unknown("CommitLimit", obs.commit_limit);
        }
        if (obs.committed_as.is_unknown()) {
            return unknown("Committed_AS", obs.committed_as);
        }
        if (obs.committed_as.value + request.bytes > obs.commit_limit.value) {
            return refuse("vm.overcommit_memory = 2 (strict) and Committed_AS " + format_mib(obs.committed_as.value) +
                          " + request exceeds CommitLimit " + format_mib(obs.commit_limit.value) +
                          "; add swap, raise vm.overcommit_ratio, or lower the budgets");
        }
        d.checks.push_back("overcommit mode 2: Committed_AS + request <= CommitLimit " + format_mib(obs.commit_limit.value));
    } else {
        d.checks.push_back("overcommit mode " + std::to_string(obs.overcommit_mode.value) + ": CommitLimit not enforced");
    }

    // cgroup: a finite memory.max (or v1 limit) binds; unknown refuses.
    if (obs.cgroup_memory_max.is_unknown()) {
        return unknown("the cgroup memory limit", obs.cgroup_memory_max);
    }
    if (obs.cgroup_memory_max.is_known()) {
        if (obs.cgroup_memory_current.is_unknown()) {
            return unknown("the cgroup memory usage", obs.cgroup_memory_current);
        }
        if (obs.cgroup_memory_current.value + request.bytes + request.headroom > obs.cgroup_memory_max.value) {
            return refuse("cgroup " + obs.cgroup_version + " limit " + format_mib(obs.cgroup_memory_max.value) + " (" +
                          obs.cgroup_memory_max.source + ") with " + format_mib(obs.cgroup_memory_current.value) +
                          " in use leaves less than the request plus headroom; raise the container's memory limit or lower the budgets");
        }
        d.checks.push_back("cgroup " + obs.cgroup_version + " limit " + format_mib(obs.cgroup_memory_max.value) +
                           " >= usage + request + headroom");
    } else {
        d.checks.push_back("cgroup: no finite memory limit (" + obs.cgroup_memory_max.source + ")");
    }

    // Process bounds.
    if (obs.rlimit_as.is_unknown()) {
        return unknown("RLIMIT_AS", obs.rlimit_as);
    }
    if (obs.rlimit_as.is_known()) {
        if (obs.vm_size.is_unknown()) {
            return unknown("VmSize", obs.vm_size);
        }
        if (obs.vm_size.value + request.bytes > obs.rlimit_as.value) {
            return refuse("RLIMIT_AS " + format_mib(obs.rlimit_as.value) + " with VmSize " + format_mib(obs.vm_size.value) +
                          " leaves less than the request; raise it (ulimit -v) or lower the budgets");
        }
        d.checks.push_back("RLIMIT_AS " + format_mib(obs.rlimit_as.value) + " >= VmSize + request");
    } else {
        d.checks.push_back("RLIMIT_AS unlimited");
    }
    if (request.kind == GrowthKind::locked) {
        if (obs.rlimit_memlock.is_unknown()) {
            return unknown("RLIMIT_MEMLOCK", obs.rlimit_memlock);
        }
        if (obs.rlimit_memlock.is_known()) {
            if (obs.vm_locked.is_unknown()) {
                return unknown("VmLck", obs.vm_locked);
            }
            if (obs.vm_locked.value + request.bytes > obs.rlimit_memlock.value) {
                return refuse("RLIMIT_MEMLOCK " + format_mib(obs.rlimit_memlock.value) + " with " + format_mib(obs.vm_locked.value) +
                              " already locked leaves less than the request; raise it (ulimit -l, memlock in "
                              "/etc/security/limits.conf) or " + lower_locked_hint(request.route));
            }
            d.checks.push_back("RLIMIT_MEMLOCK " + format_mib(obs.rlimit_memlock.value) + " >= VmLck + request");
        } else {
            d.checks.push_back("RLIMIT_MEMLOCK unlimited");
        }
    }
    d.admitted = true;
    return d;
}

}  // namespace ddo::platform
