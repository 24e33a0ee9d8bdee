#include "ddo/torch/torch_memory.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "ddo/util/build_info.hpp"

namespace ddo::torch {

RunTracker::TorchMemoryHook make_torch_memory_hook(c10::DeviceIndex device) {
    return [device]() -> std::optional<TorchMemory> {
        try {
            if (c10::cuda::device_count() <= device) return std::nullopt;
            const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
            constexpr auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
            return TorchMemory{static_cast<std::uint64_t>(stats.allocated_bytes[aggregate].current),
                               static_cast<std::uint64_t>(stats.reserved_bytes[aggregate].current)};
        } catch (...) {
            return std::nullopt;  // the sampler thread must not die; the tracker records "no value"
        }
    };
}

void attach_torch_memory(RunTracker * tracker, const c10::Device & device) {
    if (!tracker) return;
    if (device.is_cuda()) {
        tracker->set_torch_memory_hook(make_torch_memory_hook(device.has_index() ? device.index() : 0),
                                       build_info().torch_version);
    } else {
        tracker->set_torch_memory_unavailable("the run computes on the " + device.str() +
                                              ": PyTorch's CUDA caching allocator holds nothing to read");
    }
}

}  // namespace ddo::torch
