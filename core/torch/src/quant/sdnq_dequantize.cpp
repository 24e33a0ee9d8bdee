#include "ddo/torch/quant/sdnq_dequantize.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "host_kernels.hpp"

namespace ddo::torch::quant {

namespace {

// sdnq's build_hadamard(n, dtype): Kronecker powers of the 4x4 (n a power of 4) or 2x2 Sylvester matrix, in `dtype`,
// divided by sqrt(n) in place.
at::Tensor hadamard(int64_t n, at::ScalarType dtype, at::Device device) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);  // +-1: exact in any dtype
    bool pow4 = false;
    for (int64_t p = 1; p <= n; p *= 4) pow4 = pow4 || p == n;
    at::Tensor base = (pow4 ? at::tensor({1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, 1.0f}, opts).reshape({4, 4})
                            : at::tensor({1.0f, 1.0f, 1.0f, -1.0f}, opts).reshape({2, 2})).to(dtype);
    at::Tensor h = base;
    for (int64_t size = base.size(0); size < n; size *= base.size(0)) h = at::kron(h, base);
    return h.div_(std::pow(double(n), 0.5)).contiguous();
}

ddo::store::DType store_dtype(at::ScalarType t) {
    using ddo::store::DType;
    switch (t) {
        case at::kChar: return DType::i8;
        case at::kByte: return DType::u8;
        case at::kFloat8_e4m3fn: return DType::f8_e4m3;
        case at::kFloat8_e5m2: return DType::f8_e5m2;
        case at::kHalf: return DType::f16;
        case at::kBFloat16: return DType::bf16;
        case at::kFloat: return DType::f32;
        case at::kDouble: return DType::f64;
        default: return DType::boolean;  // no SDNQ part is stored so: refused by the check
    }
}

std::optional<ddo::store::SdnqPart> part_of(const std::optional<at::Tensor> & t) {
    if (!t) return std::nullopt;
    return ddo::store::SdnqPart{store_dtype(t->scalar_type()), t->sizes().vec()};
}

// The stored tensors checked against the rule before any arithmetic (the store's one rule): throws naming the layer.
void check_layout(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                  const std::string & name) {
    ddo::store::check_sdnq_parts({part_of(t.weight), part_of(t.scale), part_of(t.zero_point), part_of(t.svd_up), part_of(t.svd_down)},
                                 rule, out, in, name, name);
}

}  // namespace

at::Tensor sdnq_dequantize(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                           at::ScalarType result, const std::string & name) {
    check_layout(t, rule, out, in, name);
    const auto cdt = rule.fp32 ? at::kFloat : result;  // what diffusers' SDNQ loader casts the scales and factors to
    const bool grouped = t.scale.dim() == 3;
    const int64_t groups = grouped ? t.scale.size(1) : 1;
    const std::vector<int64_t> qshape = grouped ? std::vector<int64_t>{out, groups, in / groups} : std::vector<int64_t>{out, in};
    at::Tensor q = t.weight;
    if (rule.dtype.packed) {
        q = at::stack({t.weight.bitwise_and(15), t.weight.bitwise_right_shift(4)}, -1).view(qshape);  // unpack_uint4
        if (!rule.dtype.is_unsigned) q = q.to(cdt).add_(-8);  // offset-binary int4
    }
    // Note [SDNQ scales through the model dtype]: the loader rounds the stored floating tensors to the model dtype
    // before SDNQ casts them to the dequantization dtype.
    const auto loaded = [&](const at::Tensor & x) { return x.to(result).to(cdt); };
    const auto scale = loaded(t.scale);
    at::Tensor r = t.zero_point ? at::addcmul(loaded(*t.zero_point), q.to(cdt), scale) : q.to(cdt).mul_(scale);
    // Note [One layout per decoded weight]: a layer stored [in, out] (quantized matmul) decodes to the same contiguous
    // [out, in] as its plain twin, so the matmul that consumes it takes the same kernel path and rounds the same.
    r = rule.transposed ? r.t().contiguous() : r.reshape({out, in});
    if (t.svd_up) {
        auto up = loaded(*t.svd_up), down = loaded(*t.svd_down);
        const bool contiguous_mm = !r.is_cuda();  // sdnq's use_contiguous_fp16_mm: true on the CPU backend
        if (rule.quantized_matmul) {
            up = up.t().contiguous();
            down = contiguous_mm ? down.t().contiguous() : down.contiguous().t();
        }
        r = r.to(up.scalar_type()).addmm_(up, down);
    }
    r = r.to(result);
    if (rule.hadamard_group > 0) {
        const int64_t g = rule.hadamard_group;
        const auto h = hadamard(g, result, r.device());
        r = at::matmul(r.contiguous().unflatten(-1, {-1, g}), r.is_cuda() ? h.t() : h).flatten(-2, -1);
    }
    return r;
}

bool sdnq_fuses(const ddo::store::SdnqLayerRule & rule, bool has_svd, const std::vector<int64_t> & scale_shape) {
    return rule.dtype.integer && !rule.transposed && rule.hadamard_group == 0 && !has_svd && scale_shape.size() == 2 &&
           scale_shape[1] == 1;
}

void sdnq_dequantize_into(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                          at::Tensor & dst, const std::string & name) {
    check_layout(t, rule, out, in, name);
    // Note [Host decode kernels]: row-wise integer layers as stored, nothing added after the scale (no SVD factors,
    // no rotation), decoded into float32 in one pass; the cast to the model dtype and back is the identity there.
    const bool fast = t.weight.is_cpu() && dst.is_cpu() && dst.scalar_type() == at::kFloat && dst.is_contiguous() &&
                      dst.dim() == 2 && dst.size(0) == out && dst.size(1) == in &&
                      sdnq_fuses(rule, t.svd_up.has_value(), t.scale.sizes().vec()) && t.scale.size(0) == out &&
                      (!rule.dtype.packed || in % 2 == 0) && t.weight.is_contiguous();
    if (!fast) {
        dst.copy_(sdnq_dequantize(t, rule, out, in, dst.scalar_type(), name));
        return;
    }
    const auto f32 = [](const at::Tensor & x) { return x.to(at::kFloat).reshape({-1}).contiguous(); };
    host::sdnq_rows(t.weight, rule.dtype.packed, rule.dtype.packed && !rule.dtype.is_unsigned ? -8.0f : 0.0f, f32(t.scale),
                    t.zero_point ? f32(*t.zero_point) : at::Tensor(), dst);
}

}  // namespace ddo::torch::quant
