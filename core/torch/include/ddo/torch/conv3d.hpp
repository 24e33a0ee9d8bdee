// conv3d: at::conv3d with the smaller transient on the CPU. oneDNN (ATen's CPU path for all but tiny inputs) copies
// the weight into its blocked layout on every call: a transient the size of the weight, however small the input. A
// decoder run tile by tile calls its widest convolutions (an LTX-2.3 upsampler: 4096 x 1024 x 27 floats, 432 MiB) on
// a few dozen voxels each time, so that copy was most of a tile's working set. When the output has under a quarter as
// many voxels (times the batch) as the weight has output channels, the im2col path (at::slow_conv3d: a column buffer
// of C_in * k^3 * voxels, then one GEMM against the weight as it lies) needs under a quarter of the copy's memory, and
// is faster there too: it is used. Note [Conv3d weight reorder] in docs/architecture.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace ddo::torch {

// True when conv3d takes the im2col path: a CPU input, float / double / bfloat16, and 4 x batch x output voxels <
// output channels. `input` [B, C_in, D, H, W], `weight` [C_out, C_in, kD, kH, kW] (groups 1, dilation 1); `stride` and
// `padding` one value or three.
bool conv3d_uses_im2col(const at::Tensor & input, const at::Tensor & weight, c10::IntArrayRef stride,
                        c10::IntArrayRef padding);

// at::conv3d(input, weight, bias, stride, padding) with groups 1 and dilation 1; `bias` may be undefined. The two
// paths sum in different orders: they agree to rounding (fp32: ~1e-6 relative), not bitwise; the choice depends on
// the sizes only, so the same call always takes the same path.
at::Tensor conv3d(const at::Tensor & input, const at::Tensor & weight, const at::Tensor & bias, c10::IntArrayRef stride,
                  c10::IntArrayRef padding);

}  // namespace ddo::torch
