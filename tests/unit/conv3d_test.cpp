// ddo::torch::conv3d (Note [Conv3d weight reorder]): which sizes take the im2col path, that both paths give
// at::conv3d's result to rounding (bias or not, stride, padding, 1x1x1, bfloat16), and that the im2col path makes no
// weight-sized transient (the reason it exists): its peak RSS rise stays far below the weight's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>

#include <ATen/ATen.h>

#include "ddo/torch/conv3d.hpp"

namespace {

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, at::ScalarType t = at::kFloat) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randn(shape, g, at::TensorOptions().dtype(at::kFloat)).to(t);
}

double max_rel(const at::Tensor & got, const at::Tensor & want) {
    const auto scale = want.abs().max().item<double>();
    return (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<double>() / std::max(scale, 1e-30);
}

// The RSS high-water mark's rise over one call: VmHWM is reset to the current RSS first (writing 5 to
// /proc/self/clear_refs, Linux 4.0+); -1 when that is refused.
double peak_rss_rise_mib(const std::function<void()> & f) {
    auto status_kb = [](const char * field) {
        long kb = -1;
        std::ifstream status("/proc/self/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind(field, 0) == 0) kb = std::stol(line.substr(std::strlen(field)));
        return kb;
    };
    {
        std::ofstream reset("/proc/self/clear_refs");
        reset << "5";
        if (!reset.flush()) return -1;
    }
    const long before = status_kb("VmRSS:");
    f();
    return double(status_kb("VmHWM:") - before) / 1024;
}

}  // namespace

TEST(Conv3d, TheIm2colPathIsTakenWhenTheOutputHasUnderAQuarterAsManyVoxelsAsOutputChannels) {
    const auto w = randn({256, 8, 3, 3, 3}, 1);
    // 1 x (3 x 4 x 4) = 48 output voxels, 4 x 48 < 256 channels (padding 1 keeps the size).
    EXPECT_TRUE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 3, 4, 4}, 2), w, {1, 1, 1}, {1, 1, 1}));
    // Batch 2: 4 x 96 >= 256; 64 channels: 4 x 48 >= 64.
    EXPECT_FALSE(ddo::torch::conv3d_uses_im2col(randn({2, 8, 3, 4, 4}, 2), w, {1, 1, 1}, {1, 1, 1}));
    EXPECT_FALSE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 3, 4, 4}, 2), w.narrow(0, 0, 64), {1}, {1}));
    // Without padding: 1 x 2 x 2 = 4 voxels; with stride 2 on a larger input: 3 x 3 x 3 = 27, 4 x 27 < 256.
    EXPECT_TRUE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 3, 4, 4}, 2), w, {1, 1, 1}, {0, 0, 0}));
    EXPECT_TRUE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 7, 7, 7}, 3), w, {2}, {0}));
    // 8 x 8 x 8 = 512 voxels: oneDNN's copy of a 256 x 8 x 27 weight is the smaller transient.
    EXPECT_FALSE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 8, 8, 8}, 4), w, {1}, {1}));
    // Half precision and mismatched channels stay with at::conv3d.
    EXPECT_FALSE(ddo::torch::conv3d_uses_im2col(randn({1, 8, 3, 4, 4}, 2, at::kHalf), w.to(at::kHalf), {1}, {1}));
    EXPECT_FALSE(ddo::torch::conv3d_uses_im2col(randn({1, 4, 3, 4, 4}, 2), w, {1}, {1}));
}

TEST(Conv3d, BothPathsGiveAtenConv3dsResult) {
    struct Case {
        std::vector<int64_t> x, w;
        std::vector<int64_t> stride, padding;
        bool bias;
        at::ScalarType dtype;
        double tol;
        bool im2col;  // the path the sizes choose
    };
    const std::vector<Case> cases = {
        {{1, 16, 3, 4, 4}, {96, 16, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}, true, at::kFloat, 1e-5, true},  // im2col
        {{1, 16, 3, 4, 4}, {96, 16, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}, false, at::kFloat, 1e-5, true},  // im2col, no bias
        {{1, 16, 5, 6, 6}, {96, 16, 3, 3, 3}, {2, 2, 2}, {0, 0, 0}, true, at::kFloat, 1e-5, true},  // im2col, stride
        {{1, 16, 3, 4, 4}, {256, 16, 1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true, at::kFloat, 1e-5, true},  // im2col, 1x1x1
        {{1, 16, 9, 12, 12}, {24, 16, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}, true, at::kFloat, 1e-5, false},  // at::conv3d
        {{1, 16, 3, 4, 4}, {96, 16, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}, true, at::kBFloat16, 2e-2, true},  // im2col, bf16
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto & c = cases[i];
        const auto x = randn(c.x, 10 + i, c.dtype), w = randn(c.w, 20 + i, c.dtype);
        const auto b = c.bias ? randn({c.w[0]}, 30 + i, c.dtype) : at::Tensor();
        const auto got = ddo::torch::conv3d(x, w, b, c.stride, c.padding);
        const auto want = at::conv3d(x, w, b, at::IntArrayRef(c.stride), at::IntArrayRef(c.padding));
        EXPECT_EQ(ddo::torch::conv3d_uses_im2col(x, w, c.stride, c.padding), c.im2col) << "case " << i;
        ASSERT_EQ(got.sizes(), want.sizes()) << "case " << i;
        EXPECT_EQ(got.scalar_type(), c.dtype) << "case " << i;
        EXPECT_LE(max_rel(got, want), c.tol) << "case " << i;
    }
}

TEST(Conv3d, TheIm2colPathMakesNoWeightSizedCopy) {
    // An LTX-2.3 decoder tile's shape at its widest level: a 1024 x 1024 x 27 fp32 weight (108 MiB) on a causally
    // padded 5 x 6 x 6 input, 48 output voxels. at::conv3d takes oneDNN here (B x C x D x H > 20480) and copies the
    // weight; the columns are 1024 x 27 x 48 x 4 B = 5.1 MiB.
    const auto x = randn({1, 1024, 5, 6, 6}, 5), w = randn({1024, 1024, 3, 3, 3}, 6);
    ASSERT_TRUE(ddo::torch::conv3d_uses_im2col(x, w, {1}, {0}));
    const double weight_mib = double(w.numel()) * 4 / (1 << 20);
    at::Tensor y;
    const double lean = peak_rss_rise_mib([&] { y = ddo::torch::conv3d(x, w, at::Tensor(), {1}, {0}); });
    const double aten =
        peak_rss_rise_mib([&] { y = at::conv3d(x, w, at::Tensor(), at::IntArrayRef{1}, at::IntArrayRef{0}); });
    std::cout << "[ conv3d    ] 1024x1024x3x3x3 weight (" << weight_mib << " MiB) on 48 output voxels: peak RSS rise "
              << lean << " MiB on the im2col path, " << aten << " MiB through at::conv3d\n";
    ASSERT_GE(lean, 0);
    EXPECT_LT(lean, weight_mib / 4);
}
