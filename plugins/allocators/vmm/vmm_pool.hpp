// VmmPool: the policy of the vmm allocator over any VmmBackend. Buffers ("execution slots") each own
// one address range reserved for their whole life and, while backed, one physical chunk mapped
// there. Rules (docs/architecture.md, "Allocators, host staging and admission"):
//  - reclaim drops a buffer's physical chunk and keeps its address; recreate maps a fresh chunk at
//    that same address (payload undefined, the caller uploads again);
//  - release of a buffer parks its range and chunk in an idle cache (reused by a reserve of the same
//    size), and trim_idle returns the idle cache to the system; live buffers keep their payloads;
//  - release, reclaim, recreate and close are refused with BUSY while a buffer is leased or pending;
//  - physical_limit and virtual_limit bound chunks and ranges held, the idle cache included; growth
//    first trims the idle cache, then answers OUT_OF_MEMORY naming the limit;
//  - a backend failure is counted; a chunk or range whose release failed is quarantined (withheld,
//    still counted as held) and retried at close. See Note [VMM pool states].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddo/ddo_allocator_plugin.h"
#include "vmm_backend.hpp"

namespace ddo::vmm {

class VmmPool {
public:
    // Validates config and options, picks the backend (AUTO: CUDA when usable, else host; the reason
    // CUDA was not used is returned in *auto_note). On failure returns the status and *reason.
    static ddo_status create(const ddo_alloc_config & config, std::unique_ptr<VmmPool> * out, std::string * reason,
                             std::string * auto_note);

    ~VmmPool();  // releases what is left; callers go through close()

    // BUSY (pool untouched) while a buffer is leased or pending. Otherwise releases everything; OK
    // when every chunk and range was returned, else UNAVAILABLE with the count left quarantined.
    ddo_status close(std::string * reason);
    ddo_status reserve(std::uint64_t bytes, std::uint64_t alignment, ddo_alloc_buffer * out, std::string * reason);
    ddo_status release(std::uint64_t id, std::string * reason);
    ddo_status set_flags(std::uint64_t id, std::uint32_t flags, std::string * reason);
    ddo_status reclaim(std::uint64_t id, std::string * reason);
    ddo_status recreate(std::uint64_t id, std::string * reason);
    ddo_status trim_idle(std::uint64_t * out_released, std::string * reason);
    ddo_status get_stats(ddo_alloc_stats * out, std::string * reason);

private:
    struct Slot {
        std::uint64_t id = 0;
        std::uintptr_t addr = 0;
        std::uint64_t bytes = 0;   // multiple of the granularity
        std::uint64_t handle = 0;  // backend chunk handle, valid while backed
        bool backed = false;
        std::uint32_t flags = 0;
    };
    struct Quarantined {
        std::uintptr_t addr = 0;
        std::uint64_t bytes = 0;
        std::uint64_t handle = 0;
        bool mapped = false, has_chunk = false, has_range = false;
    };

    VmmPool(std::unique_ptr<VmmBackend> backend, const ddo_alloc_config & config, bool cache_released);

    bool busy(const Slot & s) const { return s.flags != 0; }
    ddo_status refuse_busy(const Slot & s, const char * what, std::string * reason);
    ddo_status no_such_buffer(std::uint64_t id, const char * what, std::string * reason);
    // Makes room for `bytes` more of the given kind, trimming the idle cache first.
    ddo_status admit_growth(std::uint64_t physical, std::uint64_t virtual_bytes, std::string * reason);
    ddo_status back_slot(Slot & s, std::string * reason);            // create + map at s.addr
    ddo_status unback_slot(Slot & s, std::string * reason);          // unmap + release
    ddo_status destroy_slot(Slot & s, std::string * reason);         // unback + free range
    std::uint64_t trim_locked(std::uint64_t wanted, std::string * reason);  // frees idle slots
    void retry_quarantine();
    void count_failure(const BackendResult & r, std::string * reason);

    std::mutex mutex_;
    std::unique_ptr<VmmBackend> backend_;
    std::uint64_t physical_limit_;
    std::uint64_t virtual_limit_;
    bool cache_released_;
    std::uint64_t next_id_ = 1;
    std::map<std::uint64_t, Slot> live_;
    std::vector<Slot> idle_;               // released, still reserved and backed; oldest first
    std::vector<Quarantined> quarantine_;
    ddo_alloc_stats stats_{};
};

}  // namespace ddo::vmm
