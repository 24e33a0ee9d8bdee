// at::Tensor views over a leased group: non-owning tensors at the slot (or resident) address, on the
// lease's device (CPU for the CPU transport). Valid until the lease is released; the engine reuses
// the slot only after the compute fence recorded at release completes, so kernels enqueued while the
// lease was held may still read them.
//
//   ddo::engine::Lease lease = engine.acquire(g);
//   ddo::torch::GroupTensors w = ddo::torch::tensor_views(lease);
//   auto y = at::linear(x, w.at("transformer_blocks.3.attn.to_q.weight"), w.at("...bias"));
//   lease.release();
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "ddo/engine/engine.hpp"
#include "ddo/store/dtype.hpp"

namespace ddo::torch {

// Throws ddo::UsageError for a dtype ATen cannot represent.
c10::ScalarType to_scalar_type(ddo::store::DType t);

class GroupTensors {
public:
    // Throws UsageError naming the tensor and the group when absent.
    const at::Tensor & at(std::string_view name) const;
    bool contains(std::string_view name) const;
    const std::unordered_map<std::string, at::Tensor> & all() const noexcept { return map_; }
    std::string group;

private:
    friend GroupTensors tensor_views(const ddo::engine::Lease & lease);
    std::unordered_map<std::string, at::Tensor> map_;
};

// One view: throws UsageError naming the tensor and group when the tensor is not in the lease.
at::Tensor tensor_view(const ddo::engine::Lease & lease, std::string_view tensor);
// Every tensor of the leased group.
GroupTensors tensor_views(const ddo::engine::Lease & lease);

}  // namespace ddo::torch
