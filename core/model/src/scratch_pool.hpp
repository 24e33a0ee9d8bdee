// Reused decode buffers of one component (Note [Host decode kernels] in docs/architecture.md): a streamed group's
// quantized or dtype-converted tensors are written into buffers taken here and given back when the group is released,
// so that a step does not fault in fresh pages for every decoded weight (3.5 GB a step on the quant bench). Internal
// to libddo_model (ComponentWeights).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <nlohmann/json.hpp>

namespace ddo::model {

class ScratchPool {
public:
    // A contiguous tensor of `shape` in `dtype` on `device`: a free buffer of exactly that many bytes, else new memory.
    // `offset` (bytes, a multiple of the element size, < 64): the tensor starts that far past a 64-byte boundary, so
    // that a copy keeps its source's alignment (Note [Mapped residents]).
    at::Tensor take(at::IntArrayRef shape, at::ScalarType dtype, c10::Device device, std::size_t offset = 0);
    // Hands `t` (from take) back. Kept for reuse only when nothing else holds it (no view or copy of the tensor
    // outlives its group), and only while the free buffers stay within the largest set one group has in use (the
    // oldest are dropped first).
    void give(at::Tensor t);
    // A group's buffers: in use from its acquire to its release.
    void begin_group();
    void end_group();
    void clear();
    nlohmann::json to_json() const;
    // The peak (buffers in use + kept free) a fresh pool reaches when each of `groups` (its buffers' bytes) is taken at
    // its acquire and given back at its release, one group at a time, in order, `passes` times over: take's and give's
    // policy on sizes alone, for the memory forecast (Note [Memory forecast]). Equal to to_json()'s peak_bytes after
    // the same sequence on a pool whose buffers nothing else holds.
    static std::uint64_t replay_peak(const std::vector<std::vector<std::uint64_t>> & groups, int passes);

private:
    std::vector<c10::Storage> free_;  // oldest first
    std::uint64_t free_bytes_ = 0, group_bytes_ = 0, cap_ = 0, peak_bytes_ = 0, in_use_ = 0;
    std::uint64_t reused_ = 0, allocated_ = 0, kept_by_caller_ = 0;
};

}  // namespace ddo::model
