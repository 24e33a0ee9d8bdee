// CudaBackend: the VMM contract on CUDA virtual memory management (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), with the driver resolved
// at run time (ddo/platform/cuda_driver.hpp). Without CUDA headers at build time, or without a
// driver / device at run time, create() returns nullptr and the reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "vmm_backend.hpp"

namespace ddo::vmm {

// Returns nullptr with *reason set ("no CUDA driver: ...", "CUDA device 0 does not support virtual
// memory management", "built without CUDA headers") when the CUDA backend cannot be used.
std::unique_ptr<VmmBackend> create_cuda_backend(int device, std::string * reason);

}  // namespace ddo::vmm
