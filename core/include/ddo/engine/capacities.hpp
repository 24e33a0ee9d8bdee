// Observed capacities the planner budgets against. Unknown is nullopt (never 0), and the planner
// refuses growth that depends on an unknown observation (it falls back to the smaller choice).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ddo/platform/linux_admission.hpp"

namespace ddo::engine {

struct Capacities {
    std::optional<std::uint64_t> device_free;     // bytes (cudaMemGetInfo), or host stand-in
    std::optional<std::uint64_t> device_total;
    std::optional<std::uint64_t> mem_available;  // /proc/meminfo MemAvailable
    // The memory cgroup of this process, as LinuxAdmission observes it (v2 memory.max/current, v1
    // limit_in_bytes/usage_in_bytes, the tightest ancestor): the planner and admission see one cgroup.
    std::optional<std::uint64_t> cgroup_limit;   // nullopt: no limit ("max", no controller) or unknown (below)
    std::optional<std::uint64_t> cgroup_usage;
    bool cgroup_limit_unknown = false;           // a memory controller whose limit could not be read
    std::string cgroup_version;                  // "v2", "v1", "none", "unknown"
    std::string cgroup_path;                     // the directory whose limit binds
    std::string cgroup_reason;                   // why the limit or usage is unknown
    std::optional<int> overcommit_mode;          // /proc/sys/vm/overcommit_memory (0, 1, 2)
    // Where device_free comes from when it is not a device query ("host memory: min(MemAvailable …, cgroup …)" for
    // the CPU transport): named when the observed capacity cannot hold what a plan needs.
    std::string device_source;

    // Host observations through LinuxAdmission::observe (roots: tests point them at a fake tree); device fields
    // stay nullopt (filled by the caller, e.g. from ATen on CUDA, or set to the host RAM figures for the CPU
    // transport).
    static Capacities observe_host(const platform::AdmissionRoots & roots = platform::AdmissionRoots::of_process());
    // "min(MemAvailable 20.1 GiB, cgroup v1 /a/b limit 512 MiB - usage 500 MiB)": what usable_host_ram() is made of.
    std::string describe_host_ram() const;
    // Usable host RAM: min(MemAvailable, cgroup limit - usage). nullopt (unknown: the planner refuses host growth)
    // when the cgroup has a limit whose value or usage is unknown, or when neither MemAvailable nor a limit is known.
    std::optional<std::uint64_t> usable_host_ram() const;
    nlohmann::json to_json() const;  // nulls with "<field>_reason" for unknown values
};

}  // namespace ddo::engine
