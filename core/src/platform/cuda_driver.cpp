// The run-time resolved CUDA driver API (see ddo/platform/cuda_driver.hpp). This file is compiled
// into libddo_core and, as a private copy with hidden visibility, into the vmm allocator plugin,
// which must stay a pure C library (docs/architecture.md, "Allocators, host staging and admission").
#if DDO_HAVE_CUDA_HEADERS

#include "ddo/platform/cuda_driver.hpp"

#include <dlfcn.h>

namespace ddo::platform {
namespace {

// cuGetProcAddress_v2: (symbol, pfn, cudaVersion, flags, symbolStatus). Looked up with dlsym so the
// header's macro mapping does not matter.
using GetProcAddressV2 = CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

// The ABI our typedefs describe: cuda.h's default (per-version) variants, requested as of 12.0.
constexpr int kRequestedApiVersion = 12000;

#define DDO_CUDA_STR_(x) #x
#define DDO_CUDA_STR(x) DDO_CUDA_STR_(x)

struct Loaded {
    const CudaDriver * driver = nullptr;
    std::string reason;
};

}  // namespace

const CudaDriver * CudaDriver::get(std::string * reason) {
    static Loaded loaded = [] {
        Loaded out;
        void * handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char * err = dlerror();
            out.reason = std::string("no CUDA driver: dlopen(\"libcuda.so.1\") failed: ") +
                         (err != nullptr ? err : "unknown error") +
                         "; install the NVIDIA driver or use the host backend";
            return out;
        }
        // The handle is intentionally never closed: the driver stays loaded for the process.
        auto * get_proc = reinterpret_cast<GetProcAddressV2>(dlsym(handle, "cuGetProcAddress_v2"));
        auto * driver = new CudaDriver();  // process lifetime, like the library itself
        std::string missing;
        auto resolve = [&](void ** slot, const char * base, const char * versioned) {
            *slot = nullptr;
            if (get_proc != nullptr) {
                CUdriverProcAddressQueryResult status{};
                if (get_proc(base, slot, kRequestedApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
                    *slot = nullptr;
                }
            }
            if (*slot == nullptr) {
                *slot = dlsym(handle, versioned);
            }
            if (*slot == nullptr) {
                missing += missing.empty() ? "" : ", ";
                missing += versioned;
            }
        };
#define DDO_RESOLVE(field, name) resolve(reinterpret_cast<void **>(&driver->api_.field), #name, DDO_CUDA_STR(name))
        DDO_RESOLVE(init, cuInit);
        DDO_RESOLVE(driver_get_version, cuDriverGetVersion);
        DDO_RESOLVE(get_error_name, cuGetErrorName);
        DDO_RESOLVE(get_error_string, cuGetErrorString);
        DDO_RESOLVE(device_get_count, cuDeviceGetCount);
        DDO_RESOLVE(device_get, cuDeviceGet);
        DDO_RESOLVE(device_get_attribute, cuDeviceGetAttribute);
        DDO_RESOLVE(primary_ctx_retain, cuDevicePrimaryCtxRetain);
        DDO_RESOLVE(primary_ctx_release, cuDevicePrimaryCtxRelease);
        DDO_RESOLVE(ctx_set_current, cuCtxSetCurrent);
        DDO_RESOLVE(ctx_synchronize, cuCtxSynchronize);
        DDO_RESOLVE(mem_get_allocation_granularity, cuMemGetAllocationGranularity);
        DDO_RESOLVE(mem_address_reserve, cuMemAddressReserve);
        DDO_RESOLVE(mem_address_free, cuMemAddressFree);
        DDO_RESOLVE(mem_create, cuMemCreate);
        DDO_RESOLVE(mem_release, cuMemRelease);
        DDO_RESOLVE(mem_map, cuMemMap);
        DDO_RESOLVE(mem_unmap, cuMemUnmap);
        DDO_RESOLVE(mem_set_access, cuMemSetAccess);
        DDO_RESOLVE(memcpy_htod, cuMemcpyHtoD);
        DDO_RESOLVE(memcpy_dtoh, cuMemcpyDtoH);
        DDO_RESOLVE(mem_host_alloc, cuMemHostAlloc);
        DDO_RESOLVE(mem_free_host, cuMemFreeHost);
        DDO_RESOLVE(mem_host_register, cuMemHostRegister);
        DDO_RESOLVE(mem_host_unregister, cuMemHostUnregister);
        DDO_RESOLVE(mem_get_info, cuMemGetInfo);
#undef DDO_RESOLVE
        if (!missing.empty()) {
            out.reason = "CUDA driver too old: libcuda.so.1 lacks " + missing + "; update the NVIDIA driver";
            return out;
        }
        CUresult rc = driver->api_.init(0);
        if (rc != CUDA_SUCCESS) {
            out.reason = "no usable CUDA device: cuInit(0) returned " + driver->describe(rc) +
                         "; check the driver and CUDA_VISIBLE_DEVICES, or use the host backend";
            return out;
        }
        driver->api_.driver_get_version(&driver->driver_version_);
        out.driver = driver;
        return out;
    }();
    if (loaded.driver == nullptr && reason != nullptr) {
        *reason = loaded.reason;
    }
    return loaded.driver;
}

std::string CudaDriver::describe(CUresult result) const {
    const char * name = nullptr;
    const char * text = nullptr;
    if (api_.get_error_name != nullptr) {
        api_.get_error_name(result, &name);
    }
    if (api_.get_error_string != nullptr) {
        api_.get_error_string(result, &text);
    }
    std::string out = name != nullptr ? name : ("CUresult " + std::to_string(static_cast<int>(result)));
    if (text != nullptr) {
        out += std::string(" (") + text + ")";
    }
    return out;
}

bool CudaDriver::make_current(int ordinal, CUdevice * out_device, CUcontext * out_context, std::string * reason) const {
    int count = 0;
    CUresult rc = api_.device_get_count(&count);
    if (rc != CUDA_SUCCESS || count == 0) {
        if (reason != nullptr) {
            *reason = rc != CUDA_SUCCESS ? "cuDeviceGetCount returned " + describe(rc) : "the driver reports no CUDA device";
        }
        return false;
    }
    if (ordinal < 0 || ordinal >= count) {
        if (reason != nullptr) {
            *reason = "CUDA device " + std::to_string(ordinal) + " does not exist (the driver reports " +
                      std::to_string(count) + "); choose a device ordinal below " + std::to_string(count);
        }
        return false;
    }
    CUdevice device = 0;
    CUcontext context = nullptr;
    if ((rc = api_.device_get(&device, ordinal)) != CUDA_SUCCESS ||
        (rc = api_.primary_ctx_retain(&context, device)) != CUDA_SUCCESS) {
        if (reason != nullptr) {
            *reason = "cannot retain the primary context of CUDA device " + std::to_string(ordinal) + ": " + describe(rc);
        }
        return false;
    }
    if ((rc = api_.ctx_set_current(context)) != CUDA_SUCCESS) {
        api_.primary_ctx_release(device);
        if (reason != nullptr) {
            *reason = "cuCtxSetCurrent failed for CUDA device " + std::to_string(ordinal) + ": " + describe(rc);
        }
        return false;
    }
    *out_device = device;
    *out_context = context;
    return true;
}

}  // namespace ddo::platform

#endif  // DDO_HAVE_CUDA_HEADERS
