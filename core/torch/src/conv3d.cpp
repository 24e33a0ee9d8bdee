// conv3d and conv3d_uses_im2col (conv3d.hpp). Note [Conv3d weight reorder].
#include "ddo/torch/conv3d.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include <ATen/ATen.h>

namespace ddo::torch {
namespace {

// One value for all three dimensions, or one each (conv3d_uses_im2col admits no other length).
std::array<int64_t, 3> three(c10::IntArrayRef v) {
    if (v.size() == 1) return {v[0], v[0], v[0]};
    return {v[0], v[1], v[2]};
}

}  // namespace

bool conv3d_uses_im2col(const at::Tensor & input, const at::Tensor & weight, c10::IntArrayRef stride,
                        c10::IntArrayRef padding) {
    if (!input.is_cpu() || input.dim() != 5 || weight.dim() != 5 || input.size(1) != weight.size(1)) return false;
    const auto t = input.scalar_type();
    if (t != at::kFloat && t != at::kDouble && t != at::kBFloat16) return false;
    if ((stride.size() != 1 && stride.size() != 3) || (padding.size() != 1 && padding.size() != 3)) return false;
    const auto s = three(stride), p = three(padding);
    int64_t voxels = input.size(0);
    for (int64_t d = 0; d < 3; ++d) {
        const int64_t extent = input.size(d + 2) + 2 * p[std::size_t(d)] - weight.size(d + 2);
        if (extent < 0 || s[std::size_t(d)] < 1) return false;  // at::conv3d names the error
        voxels *= extent / s[std::size_t(d)] + 1;
    }
    // The columns (C_in k^3 x voxels) under a quarter of the weight's copy (C_out x C_in k^3). Measured on 2 cores
    // (fp32, ms per call, oneDNN / im2col): 1024->1024 on 48 voxels 54 / 19, 1024->4096 on 48 190 / 79, 512->2048 on
    // 320 88 / 93, 512->512 on 320 17 / 26: where the columns approach the weight, oneDNN is faster and its copy small.
    return 4 * voxels < weight.size(0);
}

std::uint64_t conv3d_column_bytes(std::int64_t c_in, std::int64_t c_out, std::int64_t k, std::int64_t d, std::int64_t h,
                                  std::int64_t w, at::ScalarType dtype) {
    if (d < k || h < k || w < k) return 0;
    const std::int64_t voxels = (d - k + 1) * (h - k + 1) * (w - k + 1);
    const std::uint64_t columns = std::uint64_t(c_in) * std::uint64_t(k * k * k) * std::uint64_t(voxels) * c10::elementSize(dtype);
    const bool ours = (dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16) && 4 * voxels < c_out;
    const bool atens = dtype == at::kFloat && k <= 3 && c_in * d * h <= 20480;
    return ours || atens ? columns : 0;
}

at::Tensor conv3d(const at::Tensor & input, const at::Tensor & weight, const at::Tensor & bias, c10::IntArrayRef stride,
                  c10::IntArrayRef padding) {
    if (!conv3d_uses_im2col(input, weight, stride, padding)) return at::conv3d(input, weight, bias, stride, padding);
    const std::optional<at::Tensor> b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
    const auto s = three(stride), p = three(padding);
    return at::slow_conv3d(input, weight, {weight.size(2), weight.size(3), weight.size(4)}, b, s, p);
}

}  // namespace ddo::torch
