// conv3d: at::conv3d with the smaller transient on the CPU. oneDNN (ATen's CPU path for all but tiny inputs) copies
// the weight into its blocked layout on every call: a transient the size of the weight, however small the input. A
// decoder run tile by tile calls its widest convolutions (an LTX-2.3 upsampler: 4096 x 1024 x 27 floats, 432 MiB) on
// a few dozen voxels each time, so that copy was most of a tile's working set. When the output has under a quarter as
// many voxels (times the batch) as the weight has output channels, the im2col path (at::slow_conv3d: a column buffer
// of C_in * k^3 * voxels, then one GEMM against the weight as it lies) needs under a quarter of the copy's memory, and
// is faster there too: it is used. Note [Conv3d weight reorder] in docs/architecture.md.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace ddo::torch {

// True when conv3d takes the im2col path: a CPU input, float / double / bfloat16, and 4 x batch x output voxels <
// output channels. `input` [B, C_in, D, H, W], `weight` [C_out, C_in, kD, kH, kW] (groups 1, dilation 1); `stride` and
// `padding` one value or three.
bool conv3d_uses_im2col(const at::Tensor & input, const at::Tensor & weight, c10::IntArrayRef stride,
                        c10::IntArrayRef padding);

// The column buffer (bytes) a stride-1 conv3d of a [1, c_in, d, h, w] input (padded) with a c_out x c_in x k^3 kernel
// allocates on the CPU: c_in k^3 x output voxels x the element size where it takes an im2col path (this file's, or
// ATen's slow_conv3d, which at::conv3d takes for float32 without oneDNN: ConvParams::use_mkldnn for batch 1 and
// kernels of at most 3 wants c_in x d x h over 20480), else 0 (oneDNN: its scratch is not modelled). Shapes only: the
// memory forecast's (Note [Memory forecast]).
std::uint64_t conv3d_column_bytes(std::int64_t c_in, std::int64_t c_out, std::int64_t k, std::int64_t d, std::int64_t h,
                                  std::int64_t w, at::ScalarType dtype);

// at::conv3d(input, weight, bias, stride, padding) with groups 1 and dilation 1; `bias` may be undefined. The two
// paths sum in different orders: they agree to rounding (fp32: ~1e-6 relative), not bitwise; the choice depends on
// the sizes only, so the same call always takes the same path.
at::Tensor conv3d(const at::Tensor & input, const at::Tensor & weight, const at::Tensor & bias, c10::IntArrayRef stride,
                  c10::IntArrayRef padding);

}  // namespace ddo::torch
