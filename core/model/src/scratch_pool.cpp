#include "scratch_pool.hpp"

#include <ATen/ATen.h>

#include <algorithm>

namespace ddo::model {

at::Tensor ScratchPool::take(at::IntArrayRef shape, at::ScalarType dtype, c10::Device device, std::size_t offset) {
    const auto elem = at::elementSize(dtype);
    if (offset % elem != 0 || offset >= 64) offset = 0;  // not representable: the allocator's own alignment
    const auto bytes = std::uint64_t(c10::multiply_integers(shape)) * elem + offset;  // the buffer's
    group_bytes_ += bytes;
    in_use_ += bytes;
    const auto at_offset = [&](c10::Storage storage) {
        // A plain tensor on the storage (set_, not a view: a view would keep a base alive and the buffer look held).
        return at::empty({0}, at::TensorOptions().dtype(dtype).device(device))
            .set_(std::move(storage), std::int64_t(offset / elem), shape);
    };
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
        if (it->nbytes() != bytes || it->device() != device) continue;
        auto storage = std::move(*it);
        free_.erase(std::next(it).base());
        free_bytes_ -= bytes;
        ++reused_;
        peak_bytes_ = std::max(peak_bytes_, in_use_ + free_bytes_);  // a reused buffer counts once
        return at_offset(std::move(storage));
    }
    ++allocated_;
    peak_bytes_ = std::max(peak_bytes_, in_use_ + free_bytes_);
    if (offset == 0) return at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
    return at_offset(at::empty({std::int64_t(bytes / elem)}, at::TensorOptions().dtype(dtype).device(device)).storage());
}

void ScratchPool::give(at::Tensor t) {
    const auto bytes = t.storage().nbytes();  // the buffer's (with take's offset)
    in_use_ -= std::min<std::uint64_t>(in_use_, bytes);
    // Held elsewhere (a view or a copy kept by the caller past its release): never written again.
    if (t.use_count() != 1 || t.storage().use_count() != 1) {
        ++kept_by_caller_;
        return;
    }
    free_.push_back(t.storage());
    free_bytes_ += bytes;
    while (free_bytes_ > cap_ && !free_.empty()) {
        free_bytes_ -= free_.front().nbytes();
        free_.erase(free_.begin());
    }
}

void ScratchPool::begin_group() { group_bytes_ = 0; }
void ScratchPool::end_group() { cap_ = std::max(cap_, group_bytes_); }

void ScratchPool::clear() {
    free_.clear();
    free_bytes_ = 0;
}

std::uint64_t ScratchPool::replay_peak(const std::vector<std::vector<std::uint64_t>> & groups, int passes) {
    std::vector<std::uint64_t> free;  // oldest first, as free_
    std::uint64_t free_bytes = 0, cap = 0, peak = 0;
    for (int pass = 0; pass < passes; ++pass) {
        for (const auto & group : groups) {
            std::uint64_t in_use = 0;
            for (const auto bytes : group) {  // take
                in_use += bytes;
                const auto it = std::find(free.rbegin(), free.rend(), bytes);  // the newest of that size
                if (it != free.rend()) {
                    free.erase(std::next(it).base());
                    free_bytes -= bytes;
                }
                peak = std::max(peak, in_use + free_bytes);
            }
            cap = std::max(cap, in_use);  // end_group: the group's bytes
            for (const auto bytes : group) {  // give, in take's order
                free.push_back(bytes);
                free_bytes += bytes;
                while (free_bytes > cap && !free.empty()) {
                    free_bytes -= free.front();
                    free.erase(free.begin());
                }
            }
        }
    }
    return peak;
}

nlohmann::json ScratchPool::to_json() const {
    return {{"peak_bytes", peak_bytes_}, {"reused", reused_}, {"allocated", allocated_}, {"kept_by_caller", kept_by_caller_}};
}

}  // namespace ddo::model
