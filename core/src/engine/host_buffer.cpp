#include "ddo/engine/host_buffer.hpp"

#include <cstdlib>
#include <utility>

#include "ddo/error.hpp"

namespace ddo::engine {

HostBuffer HostBuffer::pageable(std::uint64_t bytes, std::uint64_t alignment) {
    if (alignment < 256 || (alignment & (alignment - 1)) != 0) alignment = 4096;
    const std::uint64_t rounded = (std::max<std::uint64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    void * p = std::aligned_alloc(static_cast<std::size_t>(alignment), static_cast<std::size_t>(rounded));
    if (!p) throw RuntimeError("cannot allocate " + std::to_string(bytes) + " bytes of host memory; lower the budgets or free RAM");
    return HostBuffer(p, bytes, false, [](void * q) { std::free(q); });
}

HostBuffer::HostBuffer(HostBuffer && o) noexcept
    : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), pinned_(o.pinned_), del_(std::move(o.del_)) {}

HostBuffer & HostBuffer::operator=(HostBuffer && o) noexcept {
    if (this != &o) {
        reset();
        p_ = std::exchange(o.p_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        pinned_ = o.pinned_;
        del_ = std::move(o.del_);
    }
    return *this;
}

HostBuffer::~HostBuffer() { reset(); }

void HostBuffer::reset() noexcept {
    if (p_ && del_) del_(p_);
    p_ = nullptr;
    bytes_ = 0;
}

}  // namespace ddo::engine
