#include "ddo/model/memory_budget.hpp"

#include <algorithm>

#include "ddo/platform/cuda_driver.hpp"
#include "ddo/platform/linux_admission.hpp"

namespace ddo::model {

nlohmann::json MemoryBudget::to_json() const {
    return {{"bytes", bytes ? nlohmann::json(*bytes) : nlohmann::json(nullptr)}, {"source", source}};
}

MemoryBudget host_memory_available(const ComponentPlan & plan) {
    const auto obs = platform::LinuxAdmission().observe();
    if (!obs.mem_available.is_known())
        return {std::nullopt, "MemAvailable unknown (" + obs.mem_available.source + ": " + obs.mem_available.error + ")"};
    std::uint64_t avail = obs.mem_available.value;
    std::string source = "MemAvailable (" + obs.mem_available.source + ")";
    if (obs.cgroup_memory_max.is_known() && obs.cgroup_memory_current.is_known()) {
        const auto max = obs.cgroup_memory_max.value, cur = obs.cgroup_memory_current.value;
        const std::uint64_t room = max > cur ? max - cur : 0;
        if (room < avail) {
            avail = room;
            source = "memory cgroup limit minus usage (" + obs.cgroup_path + ")";
        }
    } else if (obs.cgroup_memory_max.is_unknown() && obs.cgroup_version != "none") {
        return {std::nullopt, "memory cgroup limit unknown (" + obs.cgroup_memory_max.error + ")"};
    }
    const auto headroom = Capacities::gib_to_bytes(plan.capacities.ram_headroom_gb);
    return {avail > headroom ? avail - headroom : 0, source + " minus capacities.ram_headroom_gb"};
}

MemoryBudget device_memory_available(const ComponentPlan & plan) {
    if (plan.capacities.device_budget_gb > 0)
        return {Capacities::gib_to_bytes(plan.capacities.device_budget_gb), "capacities.device_budget_gb"};
    if (plan.machine_device_bytes) return {plan.machine_device_bytes, plan.machine_device_source};
    if (!plan.placement.cuda) return host_memory_available(plan);
    std::string reason;
    const auto * driver = platform::CudaDriver::get(&reason);
    if (!driver) return {std::nullopt, "CUDA driver: " + reason};
    CUdevice dev{};
    CUcontext ctx{};
    if (!driver->make_current(plan.placement.index, &dev, &ctx, &reason)) return {std::nullopt, "CUDA context: " + reason};
    size_t free_bytes = 0, total = 0;
    const CUresult r = driver->api().mem_get_info(&free_bytes, &total);
    driver->api().primary_ctx_release(dev);  // make_current retained it
    if (r != CUDA_SUCCESS) return {std::nullopt, "cuMemGetInfo: " + driver->describe(r)};
    return {std::uint64_t(free_bytes), "cuMemGetInfo free bytes of cuda:" + std::to_string(plan.placement.index)};
}

}  // namespace ddo::model
