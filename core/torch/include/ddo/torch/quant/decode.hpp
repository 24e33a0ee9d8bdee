// The dense tensor of a stored encoding (ddo/store/weight_encoding.hpp), from its parts as at::Tensor views on the
// compute device (engine slots or residents, or tensors read from the file): the one dispatch from an encoding to its
// decoder (ggml_dequantize, fp8_dequantize, sdnq_dequantize). Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/store/weight_encoding.hpp"

namespace ddo::torch::quant {

// parts[i] is e.parts[i]'s tensor. Returns `e.shape` in `dtype` (a dense tensor: a view when already in `dtype`).
at::Tensor decode(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts, at::ScalarType dtype);

// Whether decode_into writes `e` into its buffer (dense in another dtype, GGML, fp8), rather than decoding into fresh
// memory (SDNQ) or viewing the part (dense in the buffer's dtype).
bool decodes_into(const ddo::store::EncodedTensor & e, at::ScalarType part_dtype, at::ScalarType dtype);

// The same tensor written into `out` (contiguous, `e.shape`, the compute dtype, on the parts' device: a component's
// reused scratch, Note [Host decode kernels]), for an `e` that decodes_into. Equal bit for bit to decode's.
void decode_into(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts, at::Tensor & out);

}  // namespace ddo::torch::quant
