// GGML block formats decoded with ATen ops, on whatever device holds the bytes (CPU, or CUDA after the engine's copy).
// The arithmetic follows gguf-py 0.19's quants.dequantize op for op (fp32 products in the same order), so the result
// equals the reference bit for bit; tests/parity/quant_dequant_parity_test.cpp checks it on files gguf-py wrote.
// Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace ddo::torch::quant {

// blocks: a contiguous uint8 tensor of the stored bytes of a tensor of `shape` (PyTorch order) in GGML type `type`
// (ddo/store/ggml_type.hpp). Returns a float32 tensor of `shape` on blocks' device. Throws ddo::RuntimeError naming
// the type when ddo does not decode it, or when the byte count does not match the shape.
at::Tensor ggml_dequantize(const at::Tensor & blocks, std::uint32_t type, at::IntArrayRef shape);

// The same decode written into `out` (contiguous float32 of `shape`, on blocks' device; a component's reused scratch):
// on the CPU Q8_0 and Q4_K run the fused host kernels (Note [Host decode kernels]), equal bit for bit; every other
// case decodes as above and copies. Throws as above.
void ggml_dequantize_into(const at::Tensor & blocks, std::uint32_t type, at::IntArrayRef shape, at::Tensor & out);

}  // namespace ddo::torch::quant
