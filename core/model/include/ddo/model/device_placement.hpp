// Where a model run computes: capacities.allocator_backend resolved against the machine. host = the CPU and
// host memory even when CUDA is usable; cuda = CUDA device 0 or a UsageError (exit 2) naming the key and the
// fix; auto = CUDA when usable, else the CPU with the reason. Decided once per run by ModelRun.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

namespace ddo {
class ResolvedSettings;
}

namespace ddo::model {

struct DevicePlacement {
    bool cuda = false;
    int index = 0;                 // CUDA device ordinal (0 today)
    std::string requested;         // auto | host | cuda, as resolved
    std::string requested_source;  // provenance of capacities.allocator_backend
    std::string reason;            // why this device: names the key and, on the CPU, why CUDA is not used

    c10::Device device() const { return cuda ? c10::Device(c10::kCUDA, c10::DeviceIndex(index)) : c10::Device(c10::kCPU); }
    // {"requested", "requested_source", "used": "cuda" | "host", "reason"}
    nlohmann::json to_json() const;
};

// Throws UsageError for capacities.allocator_backend = cuda without a usable device.
DevicePlacement place_device(const ResolvedSettings & settings);

}  // namespace ddo::model
