// RAII host memory: pageable (aligned new/delete) or pinned (allocated by a transport; cudaHostAlloc
// through ATen on CUDA, plain aligned memory standing in for it on the CPU transport).
#pragma once

#include <cstdint>
#include <functional>

namespace ddo::engine {

class HostBuffer {
public:
    HostBuffer() = default;
    // Aligned pageable memory (alignment >= 256, power of two). Throws RuntimeError on failure.
    static HostBuffer pageable(std::uint64_t bytes, std::uint64_t alignment = 4096);
    // Adopts memory with its deleter (owned by the buffer from here on).
    HostBuffer(void * p, std::uint64_t bytes, bool pinned, std::function<void(void *)> deleter) noexcept
        : p_(p), bytes_(bytes), pinned_(pinned), del_(std::move(deleter)) {}
    HostBuffer(HostBuffer && o) noexcept;
    HostBuffer & operator=(HostBuffer && o) noexcept;
    HostBuffer(const HostBuffer &) = delete;
    HostBuffer & operator=(const HostBuffer &) = delete;
    ~HostBuffer();

    void * data() const noexcept { return p_; }
    std::uint64_t bytes() const noexcept { return bytes_; }
    bool pinned() const noexcept { return pinned_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    void reset() noexcept;
    void * p_ = nullptr;
    std::uint64_t bytes_ = 0;
    bool pinned_ = false;
    std::function<void(void *)> del_;
};

}  // namespace ddo::engine
