#include "ddo/model/device_placement.hpp"

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/torch/cuda_transport.hpp"

namespace ddo::model {

nlohmann::json DevicePlacement::to_json() const {
    return {{"requested", requested}, {"requested_source", requested_source}, {"used", cuda ? "cuda" : "host"},
            {"reason", reason}};
}

DevicePlacement place_device(const ResolvedSettings & s) {
    DevicePlacement p;
    const auto & rv = s.at("capacities.allocator_backend");
    p.requested_source = rv.provenance.to_string();
    const AllocatorBackend requested = s.capacities().allocator_backend;
    p.requested = to_string(requested);
    std::string why;
    const bool usable = ddo::torch::cuda_available(&why);
    switch (requested) {
    case AllocatorBackend::host:
        p.reason = usable ? "capacities.allocator_backend = host: the CPU and host memory although a CUDA device is usable"
                          : "capacities.allocator_backend = host: the CPU and host memory";
        return p;
    case AllocatorBackend::cuda:
        if (!usable)
            throw UsageError("capacities.allocator_backend = \"cuda\" (" + p.requested_source +
                             ") but no CUDA device is usable: " + why +
                             "; run on a machine with a GPU, or set capacities.allocator_backend = \"auto\" or \"host\" "
                             "(--set capacities.allocator_backend=host) to run on the CPU");
        p.cuda = true;
        p.reason = "capacities.allocator_backend = cuda: CUDA device 0";
        return p;
    case AllocatorBackend::automatic: break;
    }
    if (usable) {
        p.cuda = true;
        p.reason = "capacities.allocator_backend = auto: a CUDA device is usable";
    } else {
        p.reason = "capacities.allocator_backend = auto: no usable CUDA device (" + why + "), the CPU and host memory";
    }
    return p;
}

}  // namespace ddo::model
