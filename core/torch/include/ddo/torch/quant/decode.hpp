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

}  // namespace ddo::torch::quant
