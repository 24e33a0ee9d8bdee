// at::Tensor views over a leased group (ddo/torch/tensor_views.hpp): at::from_blob at the slot (or
// resident) address with the checkpoint's dtype and shape, contiguous strides, no deleter (the
// engine owns the memory), on the lease's device. Nothing is copied.
#include "ddo/torch/tensor_views.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"

namespace ddo::torch {

c10::ScalarType to_scalar_type(ddo::store::DType t) {
    using ddo::store::DType;
    switch (t) {
        case DType::boolean: return c10::ScalarType::Bool;
        case DType::u8: return c10::ScalarType::Byte;
        case DType::i8: return c10::ScalarType::Char;
        case DType::u16: return c10::ScalarType::UInt16;
        case DType::i16: return c10::ScalarType::Short;
        case DType::u32: return c10::ScalarType::UInt32;
        case DType::i32: return c10::ScalarType::Int;
        case DType::u64: return c10::ScalarType::UInt64;
        case DType::i64: return c10::ScalarType::Long;
        case DType::f16: return c10::ScalarType::Half;
        case DType::bf16: return c10::ScalarType::BFloat16;
        case DType::f32: return c10::ScalarType::Float;
        case DType::f64: return c10::ScalarType::Double;
        case DType::f8_e4m3: return c10::ScalarType::Float8_e4m3fn;
        case DType::f8_e5m2: return c10::ScalarType::Float8_e5m2;
    }
    throw UsageError("dtype " + std::to_string(static_cast<int>(t)) + " has no ATen scalar type; convert the checkpoint to a supported dtype");
}

namespace {

at::Tensor make_view(const ddo::engine::Lease & lease, const ddo::engine::TensorView & v) {
    const auto shape = v.shape();
    std::vector<std::int64_t> sizes(shape.begin(), shape.end());
    std::vector<std::int64_t> strides(sizes.size(), 1);
    for (std::size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<std::int64_t>(sizes[i], 1);
    const int dev = lease.device_ordinal();
    auto opts = at::TensorOptions()
                    .dtype(to_scalar_type(v.dtype()))
                    .device(dev < 0 ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dev)));
    // No deleter: the memory belongs to the engine; the compute fence recorded at release guards reuse.
    return at::from_blob(v.data, sizes, strides, opts);
}

}  // namespace

at::Tensor tensor_view(const ddo::engine::Lease & lease, std::string_view tensor) {
    if (!lease) throw UsageError("tensor view of '" + std::string(tensor) + "': the lease was released; acquire the group first");
    return make_view(lease, lease.view(tensor));  // view() throws UsageError naming tensor and group
}

GroupTensors tensor_views(const ddo::engine::Lease & lease) {
    if (!lease) throw UsageError("tensor views: the lease was released; acquire the group first");
    const auto & gl = lease.layout();
    GroupTensors out;
    out.group = gl.name;
    out.map_.reserve(gl.tensors.size());
    for (const auto & s : gl.tensors) {
        const ddo::engine::TensorView v{s.info, lease.tensor_data(s)};
        out.map_.emplace(s.name(), make_view(lease, v));
    }
    return out;
}

const at::Tensor & GroupTensors::at(std::string_view name) const {
    auto it = map_.find(std::string(name));
    if (it == map_.end())
        throw UsageError("tensor '" + std::string(name) + "' is not in execution group '" + group + "'; acquire the group that holds it");
    return it->second;
}

bool GroupTensors::contains(std::string_view name) const { return map_.find(std::string(name)) != map_.end(); }

}  // namespace ddo::torch
