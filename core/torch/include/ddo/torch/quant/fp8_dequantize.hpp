// float8 weights (e4m3fn, e5m2) decoded with ATen ops, in each writer's arithmetic, so that ddo's dense weight equals
// the one the writer's own loader builds:
//   - fp32:    (q.float() * scale.float()).to(out)  -- TorchAO Float8Tensor.dequantize(), Lightricks' LTX-2 fp8
//              checkpoints (weight_scale folded in fp32), SDNQ's float8 weights;
//   - out:     q.to(out) * scale.to(out)            -- ComfyUI's scaled_fp8 / comfy_quant layers (math in the
//              compute dtype, TensorCoreFP8Layout.dequantize);
//   - no scale: q.to(out)                            -- an unscaled fp8 cast (ComfyUI "fp8_e4m3fn"), exact.
// Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace ddo::torch::quant {

enum class Fp8ScaleMath { fp32, out_dtype };

// q: a float8_e4m3fn or float8_e5m2 tensor [out, in] (or any shape). scale: none; one element (per tensor: 0-dim,
// [1] or [1, 1]); [out, 1] (per row); or, as TorchAO's block-wise scales, the same rank as q with each dim dividing
// q's (expanded block by block). `name` is used in errors. Throws ddo::RuntimeError naming the tensor for a scale of
// another shape, a q that is not float8, or a scale that is not floating point.
at::Tensor fp8_dequantize(const at::Tensor & q, const std::optional<at::Tensor> & scale, Fp8ScaleMath math,
                          at::ScalarType out, const std::string & name);

// The same decode written into `out` (contiguous, q's shape, in the output dtype, on q's device; a component's reused
// scratch): on the CPU into float32 with no scale, one scale or one per row, the fused host kernel (Note [Host decode
// kernels]), equal bit for bit; every other case decodes as above and copies. Throws as above.
void fp8_dequantize_into(const at::Tensor & q, const std::optional<at::Tensor> & scale, Fp8ScaleMath math,
                         at::Tensor & out, const std::string & name);

}  // namespace ddo::torch::quant
