// HostBackend: the VMM contract on host memory, so every pool contract runs without a GPU.
// Address ranges are PROT_NONE reservations; physical chunks are ranges of one memfd per pool,
// allocated with fallocate (so backing is real at create time, like cuMemCreate) and released with
// fallocate(PUNCH_HOLE), which returns the pages to the kernel (the memfd's st_blocks drop).
// Mapping is mmap(MAP_SHARED | MAP_FIXED) into the reserved range; unmapping re-reserves it with
// PROT_NONE in one call, so the address never leaves our ownership. See Note [Host VMM backend].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "vmm_backend.hpp"

namespace ddo::vmm {

// Owns a file descriptor; closes it once.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd & operator=(const UniqueFd &) = delete;
    UniqueFd(UniqueFd && o) noexcept : fd_(o.release()) {}
    UniqueFd & operator=(UniqueFd && o) noexcept;
    ~UniqueFd();
    int get() const { return fd_; }
    int release() { int fd = fd_; fd_ = -1; return fd; }

private:
    int fd_ = -1;
};

class HostBackend final : public VmmBackend {
public:
    // granularity: a multiple of the page size (0 = 2 MiB, the CUDA recommended granularity, so that
    // sizes round the same way on both backends). Returns nullptr with *reason set on failure.
    static std::unique_ptr<HostBackend> create(std::uint64_t granularity, std::string * reason);

    std::uint32_t kind() const override;
    const char * name() const override { return "host"; }
    std::uint64_t granularity() const override { return granularity_; }
    BackendResult reserve_range(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t * out_addr) override;
    BackendResult free_range(std::uintptr_t addr, std::uint64_t bytes) override;
    BackendResult create_chunk(std::uint64_t bytes, std::uint64_t * out_handle) override;
    BackendResult release_chunk(std::uint64_t handle, std::uint64_t bytes) override;
    BackendResult map(std::uintptr_t addr, std::uint64_t bytes, std::uint64_t handle) override;
    BackendResult unmap(std::uintptr_t addr, std::uint64_t bytes) override;

private:
    HostBackend(UniqueFd fd, std::uint64_t granularity) : fd_(std::move(fd)), granularity_(granularity) {}
    std::uint64_t take_offset(std::uint64_t bytes);
    void give_offset(std::uint64_t offset, std::uint64_t bytes);

    UniqueFd fd_;                                   // the pool's memfd ("ddo-vmm-pool-N")
    std::uint64_t granularity_;
    std::uint64_t file_end_ = 0;                    // end of the highest chunk ever handed out
    std::uint64_t file_size_ = 0;                   // the memfd's size (ftruncate)
    std::map<std::uint64_t, std::uint64_t> holes_;  // free file ranges: offset -> bytes
};

}  // namespace ddo::vmm
