// CUDA VMM backend (see cuda_backend.hpp). One physical handle per chunk, mapped with read/write
// access for the pool's device only.
#include "cuda_backend.hpp"

#include "ddo/ddo_allocator_plugin.h"

#if DDO_HAVE_CUDA_HEADERS
#include "ddo/platform/cuda_driver.hpp"
#endif

namespace ddo::vmm {

#if DDO_HAVE_CUDA_HEADERS
namespace {

using ddo::platform::CudaDriver;

class CudaBackend final : public VmmBackend {
public:
    CudaBackend(const CudaDriver & driver, int ordinal, CUdevice device, std::uint64_t granularity)
        : driver_(driver), ordinal_(ordinal), device_(device), granularity_(granularity) {}
    ~CudaBackend() override { driver_.api().primary_ctx_release(device_); }

    std::uint32_t kind() const override { return DDO_ALLOC_BACKEND_CUDA; }
    const char * name() const override { return "cuda"; }
    std::uint64_t granularity() const override { return granularity_; }

    BackendResult reserve_range(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t * out_addr) override {
        CUdeviceptr ptr = 0;
        CUresult rc = driver_.api().mem_address_reserve(&ptr, bytes, alignment, 0, 0);
        if (rc != CUDA_SUCCESS) {
            return fail(rc, "cuMemAddressReserve(" + std::to_string(bytes) + " bytes)");
        }
        *out_addr = static_cast<std::uintptr_t>(ptr);
        return BackendResult::success();
    }
    BackendResult free_range(std::uintptr_t addr, std::uint64_t bytes) override {
        CUresult rc = driver_.api().mem_address_free(static_cast<CUdeviceptr>(addr), bytes);
        return rc == CUDA_SUCCESS ? BackendResult::success() : fail(rc, "cuMemAddressFree");
    }
    BackendResult create_chunk(std::uint64_t bytes, std::uint64_t * out_handle) override {
        CUmemAllocationProp prop = allocation_prop();
        CUmemGenericAllocationHandle handle = 0;
        CUresult rc = driver_.api().mem_create(&handle, bytes, &prop, 0);
        if (rc != CUDA_SUCCESS) {
            return fail(rc, "cuMemCreate(" + std::to_string(bytes) + " bytes)");
        }
        *out_handle = static_cast<std::uint64_t>(handle);
        return BackendResult::success();
    }
    BackendResult release_chunk(std::uint64_t handle, std::uint64_t) override {
        CUresult rc = driver_.api().mem_release(static_cast<CUmemGenericAllocationHandle>(handle));
        return rc == CUDA_SUCCESS ? BackendResult::success() : fail(rc, "cuMemRelease");
    }
    BackendResult map(std::uintptr_t addr, std::uint64_t bytes, std::uint64_t handle) override {
        const auto ptr = static_cast<CUdeviceptr>(addr);
        CUresult rc = driver_.api().mem_map(ptr, bytes, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0);
        if (rc != CUDA_SUCCESS) {
            return fail(rc, "cuMemMap(" + std::to_string(bytes) + " bytes)");
        }
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = ordinal_;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = driver_.api().mem_set_access(ptr, bytes, &access, 1);
        if (rc != CUDA_SUCCESS) {
            driver_.api().mem_unmap(ptr, bytes);
            return fail(rc, "cuMemSetAccess(read/write, device " + std::to_string(ordinal_) + ")");
        }
        return BackendResult::success();
    }
    BackendResult unmap(std::uintptr_t addr, std::uint64_t bytes) override {
        CUresult rc = driver_.api().mem_unmap(static_cast<CUdeviceptr>(addr), bytes);
        return rc == CUDA_SUCCESS ? BackendResult::success() : fail(rc, "cuMemUnmap");
    }

private:
    CUmemAllocationProp allocation_prop() const {
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ordinal_;
        return prop;
    }
    BackendResult fail(CUresult rc, const std::string & call) const {
        const ddo_status status = rc == CUDA_ERROR_OUT_OF_MEMORY ? DDO_STATUS_OUT_OF_MEMORY : DDO_STATUS_UNAVAILABLE;
        return BackendResult::failure(status, "cuda backend: " + call + " on device " + std::to_string(ordinal_) +
                                                  " returned " + driver_.describe(rc));
    }

    const CudaDriver & driver_;
    int ordinal_;
    CUdevice device_;
    std::uint64_t granularity_;
};

}  // namespace

std::unique_ptr<VmmBackend> create_cuda_backend(int ordinal, std::string * reason) {
    const CudaDriver * driver = CudaDriver::get(reason);
    if (driver == nullptr) {
        return nullptr;
    }
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (!driver->make_current(ordinal, &device, &context, reason)) {
        return nullptr;
    }
    int vmm = 0;
    CUresult rc = driver->api().device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
    if (rc != CUDA_SUCCESS || vmm == 0) {
        driver->api().primary_ctx_release(device);
        *reason = "CUDA device " + std::to_string(ordinal) + " does not support virtual memory management" +
                  (rc != CUDA_SUCCESS ? " (cuDeviceGetAttribute returned " + driver->describe(rc) + ")" : std::string()) +
                  "; use the linear allocator or the host backend";
        return nullptr;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    size_t granularity = 0;
    rc = driver->api().mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (rc != CUDA_SUCCESS || granularity == 0) {
        driver->api().primary_ctx_release(device);
        *reason = "cuMemGetAllocationGranularity on CUDA device " + std::to_string(ordinal) + " returned " + driver->describe(rc);
        return nullptr;
    }
    return std::make_unique<CudaBackend>(*driver, ordinal, device, granularity);
}

#else

std::unique_ptr<VmmBackend> create_cuda_backend(int, std::string * reason) {
    *reason = "this build of the vmm plugin has no CUDA backend (built without CUDA headers; configure with "
              "CUDAToolkit_ROOT pointing at a CUDA toolkit)";
    return nullptr;
}

#endif

}  // namespace ddo::vmm
