// Fused CPU decoders for the formats a streamed step decodes most (Note [Host decode kernels] in
// docs/architecture.md): one pass over the stored bytes, writing float32 straight into a caller's buffer (the
// component's reused scratch), threaded by ATen's intra-op pool. Each performs its reference's float operations in
// order (the ATen decoders beside them do too), so both equal gguf-py / TorchAO bit for bit; the parity test checks
// both. Internal to libddo_torch: callers go through ggml_dequantize / fp8_dequantize with an `out`.
#pragma once

#include <ATen/core/Tensor.h>

namespace ddo::torch::quant::host {

// blocks: contiguous CPU uint8, whole Q8_0 (34-byte) / Q4_K (144-byte) blocks; out: contiguous CPU float32 with one
// element per encoded element. d * q (Q8_0); (d * sc) * q - dmin * m (Q4_K), as gguf-py.
void q8_0(const at::Tensor & blocks, at::Tensor & out);
void q4_k(const at::Tensor & blocks, at::Tensor & out);

// q: contiguous CPU float8_e4m3fn / float8_e5m2 [rows, ...]; scale: undefined (a plain cast), one float32 element, or
// float32 with one element per row (q.size(0)); out: contiguous CPU float32 of q's shape. float(q) * scale in float32
// (exactly q.float() * scale.float(): the fp8 -> f32 widening is exact, read from a 256-entry table).
void fp8(const at::Tensor & q, const at::Tensor & scale, at::Tensor & out);

// SDNQ's row-wise integer layers without SVD factors or rotation, stored [out, in] (not the quantized-matmul
// transposed layout): q int8 / uint8 [out, in], or uint8 holding two 4-bit values a byte (low nibble first, `packed`);
// `offset` added to each value first (-8 for int4's offset binary, else 0); scale float32 [out]; zero (unsigned
// layers) float32 [out] or undefined; out float32 [out, in]. fma(q, scale, zero), or q * scale, in float32 (sdnq's
// dequantize_weight: addcmul, which ATen's CPU kernel computes as one fused multiply-add, or mul_, after the cast).
void sdnq_rows(const at::Tensor & q, bool packed, float offset, const at::Tensor & scale, const at::Tensor & zero,
               at::Tensor & out);

}  // namespace ddo::torch::quant::host
