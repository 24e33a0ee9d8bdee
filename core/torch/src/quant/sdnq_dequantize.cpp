#include "ddo/torch/quant/sdnq_dequantize.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "ddo/error.hpp"
#include "host_kernels.hpp"
#include "shape_text.hpp"

namespace ddo::torch::quant {

namespace {

[[noreturn]] void disagree(const std::string & name, const std::string & what) {
    throw RuntimeError("SDNQ layer " + name + ": " + what +
                       "; the quantization_config does not match the tensors - re-save the checkpoint with sdnq");
}

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

// The stored tensors checked against the rule before any arithmetic: throws naming the layer when they disagree.
void check_layout(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                  const std::string & name) {
    const bool grouped = t.scale.dim() == 3;
    const int64_t groups = grouped ? t.scale.size(1) : 1;
    if (in % groups != 0) disagree(name, "scale " + shape_text(t.scale.sizes()) + " does not divide " + std::to_string(in) + " columns");
    // The expected stored layout, checked before any arithmetic.
    std::vector<int64_t> qshape = grouped ? std::vector<int64_t>{out, groups, in / groups} : std::vector<int64_t>{out, in};
    std::vector<int64_t> sshape = grouped ? std::vector<int64_t>{out, groups, 1}
                                  : rule.transposed ? std::vector<int64_t>{1, out}
                                                    : std::vector<int64_t>{out, 1};
    if (t.scale.sizes() != at::IntArrayRef(sshape) && !(t.scale.numel() == 1 && t.scale.dim() == 2))
        disagree(name, "scale " + shape_text(t.scale.sizes()) + ", expected " + shape_text(sshape) + " for " + rule.dtype.name +
                           (rule.transposed ? " (transposed: quantized matmul)" : ""));
    if (t.zero_point && t.zero_point->sizes() != t.scale.sizes())
        disagree(name, "zero_point " + shape_text(t.zero_point->sizes()) + " differs from scale " + shape_text(t.scale.sizes()));
    if (rule.dtype.is_unsigned != t.zero_point.has_value())
        disagree(name, std::string(rule.dtype.is_unsigned ? "an unsigned " : "a signed ") + rule.dtype.name + " layer " +
                           (rule.dtype.is_unsigned ? "needs a zero_point" : "has no zero_point") + ", the file " +
                           (t.zero_point ? "has one" : "has none"));
    if (rule.dtype.packed) {
        if (t.weight.scalar_type() != at::kByte || t.weight.numel() * 2 != out * in)
            disagree(name, "packed " + rule.dtype.name + " weight " + shape_text(t.weight.sizes()) + " does not hold " +
                               std::to_string(out) + "x" + std::to_string(in) + " values");
    } else {
        const auto want = rule.transposed ? std::vector<int64_t>{in, out} : qshape;
        const auto st = t.weight.scalar_type();
        const bool ok_type = rule.dtype.integer ? st == (rule.dtype.is_unsigned ? at::kByte : at::kChar)
                                                : st == (rule.dtype.name == "float8_e5m2" ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn);
        if (!ok_type || t.weight.sizes() != at::IntArrayRef(want))
            disagree(name, "weight " + shape_text(t.weight.sizes()) + " " + std::string(c10::toString(st)) + ", expected " +
                               shape_text(want) + " " + rule.dtype.name);
    }
    if (t.svd_up.has_value() != t.svd_down.has_value())
        disagree(name, t.svd_up ? "svd_up without svd_down" : "svd_down without svd_up");
    if (rule.hadamard_group > 0 && in % rule.hadamard_group != 0)
        disagree(name, "the Hadamard group " + std::to_string(rule.hadamard_group) + " does not divide " + std::to_string(in));
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
    if (rule.transposed) r.t_();
    r = r.reshape({out, in});
    if (t.svd_up) {
        auto up = loaded(*t.svd_up), down = loaded(*t.svd_down);
        const bool contiguous_mm = !r.is_cuda();  // sdnq's use_contiguous_fp16_mm: true on the CPU backend
        if (rule.quantized_matmul) {
            up = up.t().contiguous();
            down = contiguous_mm ? down.t().contiguous() : down.contiguous().t();
        }
        if (up.dim() != 2 || down.dim() != 2 || up.size(0) != out || down.size(1) != in || up.size(1) != down.size(0))
            disagree(name, "svd_up " + shape_text(t.svd_up->sizes()) + " and svd_down " + shape_text(t.svd_down->sizes()) +
                               " do not form [" + std::to_string(out) + "," + std::to_string(in) + "]" +
                               (rule.quantized_matmul ? " (stored transposed: quantized matmul)" : ""));
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
