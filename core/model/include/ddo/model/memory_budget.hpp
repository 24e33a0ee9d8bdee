// What a phase may still take: the bytes a strategy chooser (the VAE's `auto`) compares its estimates with.
// Unknown is unknown (never 0): the chooser then takes the bounded choice and says why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/model/component_plan.hpp"

namespace ddo::model {

struct MemoryBudget {
    std::optional<std::uint64_t> bytes;  // nullopt: unknown (source says why)
    std::string source;                  // the key, file or call it came from
    nlohmann::json to_json() const;
};

// The plan's compute device: capacities.device_budget_gb when set (> 0), else the machine's device memory when the
// run is planned for one (--device-memory, --machine: ComponentPlan::machine_device_bytes), else on CUDA the driver's
// free memory (cuMemGetInfo), on the CPU host_memory_available().
MemoryBudget device_memory_available(const ComponentPlan & plan);
// Host RAM: MemAvailable, bounded by the memory cgroup's limit minus its usage, minus capacities.ram_headroom_gb.
MemoryBudget host_memory_available(const ComponentPlan & plan);

}  // namespace ddo::model
