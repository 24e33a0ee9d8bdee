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

}  // namespace ddo::torch::quant::host
