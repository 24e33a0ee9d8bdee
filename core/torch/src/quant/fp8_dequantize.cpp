#include "ddo/torch/quant/fp8_dequantize.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
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

}  // namespace

at::Tensor fp8_dequantize(const at::Tensor & q, const std::optional<at::Tensor> & scale, Fp8ScaleMath math,
                          at::ScalarType out, const std::string & name) {
    if (q.scalar_type() != at::kFloat8_e4m3fn && q.scalar_type() != at::kFloat8_e5m2)
        throw RuntimeError("tensor " + name + " is " + std::string(c10::toString(q.scalar_type())) +
                           ", not float8_e4m3fn or float8_e5m2");
    if (!scale) return q.to(out);
    if (!at::isFloatingType(scale->scalar_type()))
        throw RuntimeError("the scale of fp8 tensor " + name + " is " + std::string(c10::toString(scale->scalar_type())) +
                           ", not a floating-point type; the checkpoint is inconsistent - re-export it");
    const auto s = expand_scale(*scale, q, name);
    if (math == Fp8ScaleMath::fp32) return (q.to(at::kFloat) * s.to(at::kFloat)).to(out);
    return q.to(out) * s.to(out);
}

}  // namespace ddo::torch::quant
