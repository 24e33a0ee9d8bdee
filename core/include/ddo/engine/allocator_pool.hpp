// RAII over the allocator C ABI (ddo_allocator_plugin.h): a pool and the buffers it hands out.
// Statuses become exceptions here (RuntimeError naming the operation and the plugin's answer),
// except where a refusal is an expected answer (release/close while leased or pending -> BUSY).
#pragma once

#include <cstdint>
#include <string>

#include "ddo/ddo_allocator_plugin.h"

namespace ddo::engine {

class AllocatorPool;

// One buffer of a pool. Releases on destruction; a refused release (BUSY) is counted by the pool
// and the buffer is quarantined (leaked on purpose, never reused) rather than freed under a reader.
class PoolBuffer {
public:
    PoolBuffer() = default;
    PoolBuffer(PoolBuffer && o) noexcept;
    PoolBuffer & operator=(PoolBuffer && o) noexcept;
    PoolBuffer(const PoolBuffer &) = delete;
    PoolBuffer & operator=(const PoolBuffer &) = delete;
    ~PoolBuffer();

    void * data() const noexcept { return buf_.ptr; }
    std::uint64_t bytes() const noexcept { return buf_.bytes; }
    std::uint64_t id() const noexcept { return buf_.id; }
    explicit operator bool() const noexcept { return pool_ != nullptr; }
    // DDO_ALLOC_FLAG_* ; throws RuntimeError on a failed call.
    void set_flags(std::uint32_t flags);
    // Releases now; returns the plugin's status (BUSY when leased/pending; then the buffer stays).
    ddo_status release() noexcept;

private:
    friend class AllocatorPool;
    PoolBuffer(AllocatorPool * pool, ddo_alloc_buffer b) noexcept : pool_(pool), buf_(b) {}
    AllocatorPool * pool_ = nullptr;
    ddo_alloc_buffer buf_{};
};

class AllocatorPool {
public:
    // vtable: borrowed, static storage of a loaded plugin. Throws RuntimeError when pool_create fails.
    AllocatorPool(const ddo_allocator_vtable * vtable, const ddo_alloc_config & config, std::string name = "linear");
    AllocatorPool(const AllocatorPool &) = delete;
    AllocatorPool & operator=(const AllocatorPool &) = delete;
    // Closes; when the plugin refuses (BUSY) the pool is leaked and counted, never freed under a reader.
    ~AllocatorPool();

    // Throws RuntimeError on OOM or failure (naming the bytes and the plugin's answer).
    PoolBuffer reserve(std::uint64_t bytes, std::uint64_t alignment = 256);
    // Returns the plugin's status: OK (pool gone), BUSY (a lease or an upload is pending).
    ddo_status close() noexcept;
    bool closed() const noexcept { return pool_ == nullptr; }
    ddo_alloc_stats stats() const;
    std::uint64_t refusals() const noexcept { return refusals_; }
    std::uint64_t quarantined() const noexcept { return quarantined_; }
    const ddo_allocator_vtable * vtable() const noexcept { return vt_; }
    const std::string & name() const noexcept { return name_; }

private:
    friend class PoolBuffer;
    const ddo_allocator_vtable * vt_;
    ddo_alloc_pool * pool_ = nullptr;
    std::string name_;
    std::uint64_t refusals_ = 0;
    std::uint64_t quarantined_ = 0;
};

}  // namespace ddo::engine
