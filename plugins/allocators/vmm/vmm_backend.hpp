// VmmBackend: the five primitives of a virtual-memory pool (reserve / free an address range, create
// / release a physical chunk, map / unmap a chunk at an address). The pool (vmm_pool.hpp) holds all
// policy; a backend holds none. Implemented by CUDA VMM (cuda_backend.hpp) and by memfd + fixed
// mappings on the host (host_backend.hpp), so both obey one contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ddo/ddo_plugin_abi.h"

namespace ddo::vmm {

// status == OK, or the failure with a reason naming the call, its result and the next step.
struct BackendResult {
    ddo_status status = DDO_STATUS_OK;
    std::string reason;
    bool ok() const { return status == DDO_STATUS_OK; }
    static BackendResult success() { return {}; }
    static BackendResult failure(ddo_status s, std::string why) { return {s, std::move(why)}; }
};

class VmmBackend {
public:
    virtual ~VmmBackend() = default;
    virtual std::uint32_t kind() const = 0;          // ddo_alloc_backend
    virtual const char * name() const = 0;           // "host" | "cuda"
    virtual std::uint64_t granularity() const = 0;   // every size and alignment is a multiple

    // Address space only: no physical backing, no access.
    virtual BackendResult reserve_range(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t * out_addr) = 0;
    virtual BackendResult free_range(std::uintptr_t addr, std::uint64_t bytes) = 0;
    // Physical backing, identified by a backend handle.
    virtual BackendResult create_chunk(std::uint64_t bytes, std::uint64_t * out_handle) = 0;
    virtual BackendResult release_chunk(std::uint64_t handle, std::uint64_t bytes) = 0;
    // Maps a chunk at addr (inside a reserved range) with read/write access; unmap leaves the range
    // reserved and inaccessible.
    virtual BackendResult map(std::uintptr_t addr, std::uint64_t bytes, std::uint64_t handle) = 0;
    virtual BackendResult unmap(std::uintptr_t addr, std::uint64_t bytes) = 0;
};

}  // namespace ddo::vmm
