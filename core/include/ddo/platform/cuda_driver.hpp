// CudaDriver: the CUDA driver API resolved at run time with dlopen("libcuda.so.1") and
// cuGetProcAddress (dlsym as fallback). Nothing in ddo links libcuda: a machine without a driver gets
// a reason string, never a loader error or a crash. Types come from the toolkit's cuda.h only.
//
// Include this header only from translation units compiled with the CUDA headers
// (DDO_HAVE_CUDA_HEADERS=1); callers without them report "built without CUDA headers".
#pragma once

#include <cuda.h>

#include <string>

namespace ddo::platform {

// One pointer per driver entry point we use; the names are the cuda.h names.
struct CudaDriverApi {
    decltype(&::cuInit) init = nullptr;
    decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
    decltype(&::cuGetErrorName) get_error_name = nullptr;
    decltype(&::cuGetErrorString) get_error_string = nullptr;
    decltype(&::cuDeviceGetCount) device_get_count = nullptr;
    decltype(&::cuDeviceGet) device_get = nullptr;
    decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
    decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
    decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
    decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
    decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
    // Virtual memory management.
    decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
    decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
    decltype(&::cuMemAddressFree) mem_address_free = nullptr;
    decltype(&::cuMemCreate) mem_create = nullptr;
    decltype(&::cuMemRelease) mem_release = nullptr;
    decltype(&::cuMemMap) mem_map = nullptr;
    decltype(&::cuMemUnmap) mem_unmap = nullptr;
    decltype(&::cuMemSetAccess) mem_set_access = nullptr;
    // Copies (probe and tests) and host staging.
    decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
    decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
    decltype(&::cuMemHostAlloc) mem_host_alloc = nullptr;
    decltype(&::cuMemFreeHost) mem_free_host = nullptr;
    decltype(&::cuMemHostRegister) mem_host_register = nullptr;
    decltype(&::cuMemHostUnregister) mem_host_unregister = nullptr;
    decltype(&::cuMemGetInfo) mem_get_info = nullptr;
};

class CudaDriver {
public:
    // Loads the driver once per process (never unloaded: Note [Plugin unloading] applies to
    // libcuda too) and calls cuInit(0). Returns nullptr and sets *reason (owned by caller, may be
    // NULL) when libcuda.so.1 is missing, a symbol is missing or cuInit fails.
    static const CudaDriver * get(std::string * reason);

    const CudaDriverApi & api() const { return api_; }
    int driver_version() const { return driver_version_; }

    // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code.
    std::string describe(CUresult result) const;

    // Retains the primary context of `ordinal` and makes it current on this thread. Returns false
    // with *reason set when there is no such device or the context cannot be retained.
    bool make_current(int ordinal, CUdevice * out_device, CUcontext * out_context, std::string * reason) const;

private:
    CudaDriver() = default;
    CudaDriverApi api_{};
    int driver_version_ = 0;
};

}  // namespace ddo::platform
