#include "ddo/torch/quant/fp8_dequantize.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "host_kernels.hpp"
#include "shape_text.hpp"

namespace ddo::torch::quant {

namespace {

// The scale broadcast against q, as TorchAO's _maybe_expand_scale_to_tensor_shape does: one element and per-row
// scales broadcast as they are; block-wise scales are repeated over their blocks.
at::Tensor expand_scale(const at::Tensor & s, const at::Tensor & q, const std::string & name) {
    if (s.numel() == 1) return s.dim() == 0 ? s : s.reshape({});
    if (s.dim() == q.dim()) {
        bool broadcast = true, blocks = true;
        for (int64_t i = 0; i < q.dim(); ++i) {
            broadcast = broadcast && (s.size(i) == q.size(i) || s.size(i) == 1);
            blocks = blocks && s.size(i) > 0 && q.size(i) % s.size(i) == 0;
        }
        if (broadcast) return s;
        if (blocks) {
            at::Tensor e = s;
            for (int64_t i = 0; i < q.dim(); ++i) e = e.repeat_interleave(q.size(i) / s.size(i), i);
            return e;
        }
    }
    throw RuntimeError("fp8 tensor " + name + " " + shape_text(q.sizes()) + " has a scale of shape " + shape_text(s.sizes()) +
                       ", which is neither one value, one per row, nor one per block; the checkpoint is inconsistent - "
                       "re-export it");
}

void check_operands(const at::Tensor & q, const std::optional<at::Tensor> & scale, const std::string & name) {
    if (q.scalar_type() != at::kFloat8_e4m3fn && q.scalar_type() != at::kFloat8_e5m2)
        throw RuntimeError("tensor " + name + " is " + std::string(c10::toString(q.scalar_type())) +
                           ", not float8_e4m3fn or float8_e5m2");
    if (scale && !at::isFloatingType(scale->scalar_type()))
        throw RuntimeError("the scale of fp8 tensor " + name + " is " + std::string(c10::toString(scale->scalar_type())) +
                           ", not a floating-point type; the checkpoint is inconsistent - re-export it");
}

}  // namespace

at::Tensor fp8_dequantize(const at::Tensor & q, const std::optional<at::Tensor> & scale, Fp8ScaleMath math,
                          at::ScalarType out, const std::string & name) {
    check_operands(q, scale, name);
    if (!scale) return q.to(out);
    const auto s = expand_scale(*scale, q, name);
    if (math == Fp8ScaleMath::fp32) return (q.to(at::kFloat) * s.to(at::kFloat)).to(out);
    return q.to(out) * s.to(out);
}

void fp8_dequantize_into(const at::Tensor & q, const std::optional<at::Tensor> & scale, Fp8ScaleMath math,
                         at::Tensor & out, const std::string & name) {
    check_operands(q, scale, name);
    // Both scale maths are float32 products when the output is float32: q.float() * scale.float().
    const bool per_tensor = scale && scale->numel() == 1;
    const bool per_row = scale && q.dim() == 2 && scale->dim() == 2 && scale->size(0) == q.size(0) && scale->size(1) == 1;
    if (q.is_cpu() && out.is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous() && q.is_contiguous() &&
        out.sizes() == q.sizes() && (!scale || per_tensor || per_row)) {
        host::fp8(q, scale ? scale->to(at::kFloat).contiguous() : at::Tensor(), out);
        return;
    }
    out.copy_(fp8_dequantize(q, scale, math, out.scalar_type(), name));
}

}  // namespace ddo::torch::quant
