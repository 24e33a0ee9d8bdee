// Host VMM backend: memfd + fixed mappings + hole punching (see host_backend.hpp).
#include "host_backend.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "ddo/ddo_allocator_plugin.h"

namespace ddo::vmm {
namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

constexpr std::uint64_t kDefaultGranularity = 2ull << 20;  // CUDA's recommended VMM granularity

std::atomic<std::uint64_t> g_pool_serial{0};

ddo_status status_for_errno(int err) {
    return (err == ENOMEM || err == ENOSPC || err == EFBIG) ? DDO_STATUS_OUT_OF_MEMORY : DDO_STATUS_UNAVAILABLE;
}

}  // namespace

UniqueFd & UniqueFd::operator=(UniqueFd && o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = o.release();
    }
    return *this;
}

UniqueFd::~UniqueFd() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

std::unique_ptr<HostBackend> HostBackend::create(std::uint64_t granularity, std::string * reason) {
    const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    if (granularity == 0) {
        granularity = kDefaultGranularity;
    }
    if (granularity % page != 0 || (granularity & (granularity - 1)) != 0) {
        *reason = "host backend: granularity " + std::to_string(granularity) +
                  " is not a power-of-two multiple of the page size " + std::to_string(page) +
                  "; set the pool option 'granularity' to e.g. 2097152";
        return nullptr;
    }
    const std::string name = "ddo-vmm-pool-" + std::to_string(++g_pool_serial);
    UniqueFd fd(static_cast<int>(::memfd_create(name.c_str(), MFD_CLOEXEC)));
    if (fd.get() < 0) {
        *reason = "host backend: memfd_create(\"" + name + "\") failed: " + errno_text(errno) +
                  "; the host backend needs Linux >= 3.17 with memfd support";
        return nullptr;
    }
    return std::unique_ptr<HostBackend>(new HostBackend(std::move(fd), granularity));
}

std::uint32_t HostBackend::kind() const { return DDO_ALLOC_BACKEND_HOST; }

BackendResult HostBackend::reserve_range(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t * out_addr) {
    // Over-reserve by the alignment, then return the unaligned head and the tail to the kernel.
    const std::uint64_t span = bytes + alignment;
    void * raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        const int err = errno;
        return BackendResult::failure(status_for_errno(err), "host backend: mmap(PROT_NONE, " + std::to_string(span) +
                                                                 " bytes) to reserve address space failed: " + errno_text(err) +
                                                                 "; check RLIMIT_AS (ulimit -v)");
    }
    const auto base = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (base + alignment - 1) & ~(static_cast<std::uintptr_t>(alignment) - 1);
    if (aligned > base) {
        ::munmap(raw, aligned - base);
    }
    const std::uintptr_t end = aligned + bytes;
    if (base + span > end) {
        ::munmap(reinterpret_cast<void *>(end), base + span - end);
    }
    *out_addr = aligned;
    return BackendResult::success();
}

BackendResult HostBackend::free_range(std::uintptr_t addr, std::uint64_t bytes) {
    if (::munmap(reinterpret_cast<void *>(addr), bytes) != 0) {
        const int err = errno;
        return BackendResult::failure(DDO_STATUS_UNAVAILABLE,
                                      "host backend: munmap of a reserved range failed: " + errno_text(err));
    }
    return BackendResult::success();
}

std::uint64_t HostBackend::take_offset(std::uint64_t bytes) {
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
        if (it->second >= bytes) {
            const std::uint64_t offset = it->first;
            const std::uint64_t rest = it->second - bytes;
            holes_.erase(it);
            if (rest > 0) {
                holes_.emplace(offset + bytes, rest);
            }
            return offset;
        }
    }
    const std::uint64_t offset = file_end_;
    file_end_ += bytes;
    return offset;
}

void HostBackend::give_offset(std::uint64_t offset, std::uint64_t bytes) {
    auto [it, inserted] = holes_.emplace(offset, bytes);
    // Coalesce with the next and the previous hole.
    auto next = std::next(it);
    if (next != holes_.end() && it->first + it->second == next->first) {
        it->second += next->second;
        holes_.erase(next);
    }
    if (it != holes_.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == it->first) {
            prev->second += it->second;
            holes_.erase(it);
        }
    }
}

BackendResult HostBackend::create_chunk(std::uint64_t bytes, std::uint64_t * out_handle) {
    const std::uint64_t offset = take_offset(bytes);
    if (file_end_ > file_size_) {
        // The memfd grows to cover the chunk; holes between live chunks stay sparse.
        if (::ftruncate(fd_.get(), static_cast<off_t>(file_end_)) != 0) {
            const int err = errno;
            give_offset(offset, bytes);
            return BackendResult::failure(status_for_errno(err), "host backend: ftruncate of the pool memfd to " +
                                                                     std::to_string(file_end_) + " bytes failed: " + errno_text(err));
        }
        file_size_ = file_end_;
    }
    // Allocate the pages now, like cuMemCreate: a later first touch can then not fail with SIGBUS.
    if (::fallocate(fd_.get(), 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)) != 0) {
        const int err = errno;
        give_offset(offset, bytes);
        return BackendResult::failure(status_for_errno(err), "host backend: fallocate(" + std::to_string(bytes) +
                                                                 " bytes) in the pool memfd failed: " + errno_text(err) +
                                                                 "; host memory (tmpfs/shmem, cgroup memory.max) is exhausted");
    }
    *out_handle = offset;
    return BackendResult::success();
}

BackendResult HostBackend::release_chunk(std::uint64_t handle, std::uint64_t bytes) {
    if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(handle),
                    static_cast<off_t>(bytes)) != 0) {
        const int err = errno;
        return BackendResult::failure(DDO_STATUS_UNAVAILABLE, "host backend: fallocate(PUNCH_HOLE) of " + std::to_string(bytes) +
                                                                  " bytes failed: " + errno_text(err) +
                                                                  "; the pages could not be proven released");
    }
    give_offset(handle, bytes);
    return BackendResult::success();
}

BackendResult HostBackend::map(std::uintptr_t addr, std::uint64_t bytes, std::uint64_t handle) {
    void * want = reinterpret_cast<void *>(addr);
    void * got = ::mmap(want, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_.get(), static_cast<off_t>(handle));
    if (got == MAP_FAILED) {
        const int err = errno;
        return BackendResult::failure(status_for_errno(err), "host backend: mmap(MAP_FIXED) of " + std::to_string(bytes) +
                                                                 " bytes from the pool memfd failed: " + errno_text(err) +
                                                                 "; check vm.max_map_count");
    }
    return BackendResult::success();
}

BackendResult HostBackend::unmap(std::uintptr_t addr, std::uint64_t bytes) {
    // Replacing the mapping with a PROT_NONE reservation drops it and keeps the address ours.
    void * got = ::mmap(reinterpret_cast<void *>(addr), bytes, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (got == MAP_FAILED) {
        const int err = errno;
        return BackendResult::failure(DDO_STATUS_UNAVAILABLE, "host backend: re-reserving " + std::to_string(bytes) +
                                                                  " bytes with mmap(PROT_NONE, MAP_FIXED) failed: " + errno_text(err));
    }
    return BackendResult::success();
}

}  // namespace ddo::vmm
