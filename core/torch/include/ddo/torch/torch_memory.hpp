// The run report's torch_allocated / torch_reserved monitors: what PyTorch's CUDA caching allocator
// holds on the run's device (torch.cuda.memory_allocated / memory_reserved). On the CPU there is no
// caching allocator to read, and the monitors stay null with that reason (never 0).
#pragma once

#include <c10/core/Device.h>

#include "ddo/report/run_tracker.hpp"

namespace ddo::torch {

// CUDA device: a hook that reads the caching allocator's current allocated/reserved bytes (nullopt when
// CUDA is not usable in this process). Never throws out of the hook.
RunTracker::TorchMemoryHook make_torch_memory_hook(c10::DeviceIndex device);

// Registers the hook for a CUDA `device`, or records why there is none (CPU device) with `tracker`
// (borrowed; may be null: then nothing happens).
void attach_torch_memory(RunTracker * tracker, const c10::Device & device);

}  // namespace ddo::torch
