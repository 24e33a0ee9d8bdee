#include "ddo/engine/capacities.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace ddo::engine {

namespace {

std::optional<std::uint64_t> meminfo_kib(const std::string & key) {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream ss(line.substr(key.size() + 1));
            std::uint64_t kib = 0;
            if (ss >> kib) return kib * 1024;
        }
    }
    return std::nullopt;
}

std::optional<std::uint64_t> read_u64(const char * path) {
    std::ifstream in(path);
    std::string s;
    if (!(in >> s) || s == "max") return std::nullopt;
    try { return std::stoull(s); } catch (...) { return std::nullopt; }
}

}  // namespace

Capacities Capacities::observe_host() {
    Capacities c;
    c.mem_available = meminfo_kib("MemAvailable");
    c.cgroup_limit = read_u64("/sys/fs/cgroup/memory.max");
    c.cgroup_usage = read_u64("/sys/fs/cgroup/memory.current");
    if (auto v = read_u64("/proc/sys/vm/overcommit_memory")) c.overcommit_mode = static_cast<int>(*v);
    return c;
}

std::optional<std::uint64_t> Capacities::usable_host_ram() const {
    std::optional<std::uint64_t> cg;
    if (cgroup_limit && cgroup_usage) cg = *cgroup_limit > *cgroup_usage ? *cgroup_limit - *cgroup_usage : 0;
    if (mem_available && cg) return std::min(*mem_available, *cg);
    if (mem_available) return mem_available;
    return cg;
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
    put("cgroup_limit", cgroup_limit, "no cgroup v2 memory.max limit (\"max\" or absent)");
    put("cgroup_usage", cgroup_usage, "no cgroup v2 memory.current");
    put("overcommit_mode", overcommit_mode, "/proc/sys/vm/overcommit_memory unreadable");
    return j;
}

}  // namespace ddo::engine
