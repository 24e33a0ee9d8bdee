// SDNQ layers (sdnq 0.2.8: int8, uint8, int4, uint4, float8 weights; grouped or row-wise scales; zero points; SVD
// low-rank factors; the Hadamard rotation; the transposed layouts of quantized-matmul layers) decoded with ATen ops in
// the op order of sdnq's dequantize_weight as diffusers loads a checkpoint (scales, zero points and SVD factors
// rounded to the model dtype `result` by the load, then cast to fp32 when dequantize_fp32, else kept in it; zp + q * s fused as addcmul; the SVD product added after
// the cast to the factors' dtype; the rotation after the cast to the result dtype). On the CPU the operands of the
// SVD product and the rotation are laid out as sdnq lays them out there (use_contiguous_fp16_mm), on CUDA as there.
// Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/store/sdnq_config.hpp"

namespace ddo::torch::quant {

// The stored tensors of one SDNQ layer `P`: P.weight, P.scale, and when present P.zero_point, P.svd_up, P.svd_down.
struct SdnqTensors {
    at::Tensor weight, scale;
    std::optional<at::Tensor> zero_point, svd_up, svd_down;
};

// The dense shape of a layer: ddo::store::sdnq_dense_shape.
// The dense weight [out, in] in `result`. `rule` from SdnqConfig::layer. Throws ddo::RuntimeError naming `name` (the
// layer) when a tensor's shape disagrees with the rule (a config that does not match the file).
at::Tensor sdnq_dequantize(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                           at::ScalarType result, const std::string & name);

// Whether sdnq_dequantize_into decodes a layer of `rule` in one fused pass on the CPU (into float32): a row-wise
// integer layer (scale [out, 1]) stored [out, in], with no SVD factors and no rotation. `scale_shape`: the stored scale's.
bool sdnq_fuses(const ddo::store::SdnqLayerRule & rule, bool has_svd, const std::vector<int64_t> & scale_shape);

// The same decode written into `dst` ([out, in] in the result dtype, contiguous, on the tensors' device; a component's
// reused scratch): on the CPU into float32, a row-wise integer layer stored [out, in] with no SVD factors and no
// rotation runs the fused host kernel (Note [Host decode kernels]), equal bit for bit; every other layer decodes as
// above and copies. Throws as above.
void sdnq_dequantize_into(const SdnqTensors & t, const ddo::store::SdnqLayerRule & rule, int64_t out, int64_t in,
                          at::Tensor & dst, const std::string & name);

}  // namespace ddo::torch::quant
