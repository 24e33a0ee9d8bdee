#include "ddo/engine/capacities.hpp"

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/util/format_bytes.hpp"

namespace ddo::engine {

Capacities Capacities::observe_host(const platform::AdmissionRoots & roots) {
    const platform::LinuxObservations obs = platform::LinuxAdmission(roots).observe();
    Capacities c;
    if (obs.mem_available.is_known()) c.mem_available = obs.mem_available.value;
    if (obs.overcommit_mode.is_known()) c.overcommit_mode = static_cast<int>(obs.overcommit_mode.value);
    c.cgroup_version = obs.cgroup_version;
    c.cgroup_path = obs.cgroup_path;
    if (obs.cgroup_memory_max.is_known()) c.cgroup_limit = obs.cgroup_memory_max.value;
    else if (obs.cgroup_memory_max.is_unknown() && obs.cgroup_version != "none") {
        c.cgroup_limit_unknown = true;
        c.cgroup_reason = "memory cgroup limit unknown (" + obs.cgroup_memory_max.source + ": " + obs.cgroup_memory_max.error + ")";
    }
    if (obs.cgroup_memory_current.is_known()) c.cgroup_usage = obs.cgroup_memory_current.value;
    else if (c.cgroup_limit)
        c.cgroup_reason = "memory cgroup usage unknown (" + obs.cgroup_memory_current.source + ": " + obs.cgroup_memory_current.error + ")";
    return c;
}

std::optional<std::uint64_t> Capacities::usable_host_ram() const {
    // Seed 002: an unknown limit refuses growth; it is never "unlimited".
    if (cgroup_limit_unknown || (cgroup_limit && !cgroup_usage)) return std::nullopt;
    std::optional<std::uint64_t> cg;
    if (cgroup_limit && cgroup_usage) cg = *cgroup_limit > *cgroup_usage ? *cgroup_limit - *cgroup_usage : 0;
    if (mem_available && cg) return std::min(*mem_available, *cg);
    if (mem_available) return mem_available;
    return cg;
}

std::string Capacities::describe_host_ram() const {
    std::string cg;
    if (cgroup_limit_unknown) cg = cgroup_reason;
    else if (cgroup_limit)
        cg = "memory cgroup " + cgroup_version + " " + cgroup_path + " limit " + format_mib(*cgroup_limit) + " - usage " +
             (cgroup_usage ? format_mib(*cgroup_usage) : std::string("unknown"));
    const std::string avail = mem_available ? "MemAvailable " + format_mib(*mem_available) : "MemAvailable unknown";
    const auto usable = usable_host_ram();
    return "usable host RAM " + (usable ? format_mib(*usable) : std::string("unknown")) + " = " +
           (cg.empty() ? avail + " (no memory cgroup limit)" : "min(" + avail + ", " + cg + ")");
}

nlohmann::json Capacities::to_json() const {
    nlohmann::json j = nlohmann::json::object();
    auto put = [&](const char * k, const auto & v, const char * why) {
        if (v) j[k] = *v;
        else { j[k] = nullptr; j[std::string(k) + "_reason"] = why; }
    };
    put("device_free", device_free, "not observed (no device query for this transport)");
    put("device_total", device_total, "not observed (no device query for this transport)");
    put("mem_available", mem_available, "/proc/meminfo has no MemAvailable");
    const std::string no_limit = cgroup_limit_unknown ? cgroup_reason : "no memory cgroup limit (" + cgroup_version + ")";
    put("cgroup_limit", cgroup_limit, no_limit.c_str());
    put("cgroup_usage", cgroup_usage, cgroup_reason.empty() ? "no memory cgroup usage file" : cgroup_reason.c_str());
    j["cgroup_version"] = cgroup_version;
    j["cgroup_path"] = cgroup_path;
    put("overcommit_mode", overcommit_mode, "/proc/sys/vm/overcommit_memory unreadable");
    return j;
}

}  // namespace ddo::engine
