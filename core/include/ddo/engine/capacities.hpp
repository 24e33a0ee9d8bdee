// Observed capacities the planner budgets against. Unknown is nullopt (never 0), and the planner
// refuses growth that depends on an unknown observation (it falls back to the smaller choice).
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json_fwd.hpp>

namespace ddo::engine {

struct Capacities {
    std::optional<std::uint64_t> device_free;     // bytes (cudaMemGetInfo), or host stand-in
    std::optional<std::uint64_t> device_total;
    std::optional<std::uint64_t> mem_available;  // /proc/meminfo MemAvailable
    std::optional<std::uint64_t> cgroup_limit;   // cgroup v2 memory.max (nullopt for "max" or absent)
    std::optional<std::uint64_t> cgroup_usage;   // cgroup v2 memory.current
    std::optional<int> overcommit_mode;          // /proc/sys/vm/overcommit_memory (0, 1, 2)

    // Host observations (/proc, /sys/fs/cgroup); device fields stay nullopt (filled by the caller,
    // e.g. from ATen on CUDA, or set to the host RAM figures for the CPU transport).
    static Capacities observe_host();
    // Usable host RAM: min(MemAvailable, cgroup limit - usage) when both known; nullopt when neither.
    std::optional<std::uint64_t> usable_host_ram() const;
    nlohmann::json to_json() const;  // nulls with "<field>_reason" for unknown values
};

}  // namespace ddo::engine
