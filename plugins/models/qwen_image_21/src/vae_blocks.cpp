#include "vae_blocks.hpp"

#include <algorithm>
#include <cmath>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

struct SpecWriter {
    VaeWeightSpec & spec;
    void conv(const std::string & p, int64_t in, int64_t out, int64_t k) {
        spec[p + ".weight"] = {out, in, k, k};
        spec[p + ".bias"] = {out};
    }
    void resblock(const std::string & p, int64_t in, int64_t out) {
        spec[p + ".norm1.gamma"] = {in, 1, 1, 1};
        conv(p + ".conv1", in, out, 3);
        spec[p + ".norm2.gamma"] = {out, 1, 1, 1};
        conv(p + ".conv2", out, out, 3);
        if (in != out) conv(p + ".conv_shortcut", in, out, 1);
    }
    void mid_block(const std::string & p, int64_t dim) {
        resblock(p + ".resnets.0", dim, dim);
        resblock(p + ".resnets.1", dim, dim);
        spec[p + ".attentions.0.norm.gamma"] = {dim, 1, 1};
        conv(p + ".attentions.0.to_qkv", dim, 3 * dim, 1);
        conv(p + ".attentions.0.proj", dim, dim, 1);
    }
};

}  // namespace

std::vector<VaeStage> vae_down_stages(const VaeConfig & c) {
    // QwenImage21Encoder3d (is_residual): dims = base_dim * [1] + dim_mult; no resample in the last block.
    const int64_t n = int64_t(c.dim_mult.size());
    std::vector<VaeStage> r;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t in = c.base_dim * (i == 0 ? 1 : c.dim_mult[size_t(i - 1)]);
        const bool down = i != n - 1;
        r.push_back({in, c.base_dim * c.dim_mult[size_t(i)], down, down && c.temperal_downsample[size_t(i)]});
    }
    return r;
}

std::vector<VaeStage> vae_up_stages(const VaeConfig & c) {
    // QwenImage21Decoder3d (is_residual): dims = decoder_base_dim * [dim_mult[-1]] + reversed(dim_mult).
    const int64_t n = int64_t(c.dim_mult.size());
    std::vector<int64_t> dims{c.decoder_base_dim * c.dim_mult.back()};
    for (int64_t i = n - 1; i >= 0; --i) dims.push_back(c.decoder_base_dim * c.dim_mult[size_t(i)]);
    std::vector<bool> temporal_up(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
    std::vector<VaeStage> r;
    for (int64_t i = 0; i < n; ++i) {
        const bool up = i != n - 1;
        r.push_back({dims[size_t(i)], dims[size_t(i) + 1], up, up && temporal_up[size_t(i)]});
    }
    return r;
}

VaeWeightSpec vae_encoder_spec(const VaeConfig & c) {
    VaeWeightSpec spec;
    SpecWriter s{spec};
    const auto stages = vae_down_stages(c);
    s.conv("encoder.conv_in", c.in_channels, stages.front().in_dim, 3);
    for (size_t i = 0; i < stages.size(); ++i) {
        const auto & b = stages[i];
        const std::string p = "encoder.down_blocks." + std::to_string(i);
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r < c.num_res_blocks; ++r) {
            s.resblock(p + ".resnets." + std::to_string(r), cur, b.out_dim);
            cur = b.out_dim;
        }
        if (b.resample) {
            s.conv(p + ".downsampler.resample.1", b.out_dim, b.out_dim, 3);
            // time_conv of downsample3d only acts on later frames; images never use it but it must be well-formed.
            if (b.temporal) s.conv(p + ".downsampler.time_conv", b.out_dim, b.out_dim, 1);
        }
    }
    const int64_t top = stages.back().out_dim;
    s.mid_block("encoder.mid_block", top);
    spec["encoder.norm_out.gamma"] = {top, 1, 1, 1};
    s.conv("encoder.conv_out", top, 2 * c.z_dim, 3);  // mean and logvar
    s.conv("quant_conv", 2 * c.z_dim, 2 * c.z_dim, 1);
    return spec;
}

VaeWeightSpec vae_decoder_spec(const VaeConfig & c) {
    VaeWeightSpec spec;
    SpecWriter s{spec};
    const auto stages = vae_up_stages(c);
    s.conv("post_quant_conv", c.z_dim, c.z_dim, 1);
    s.conv("decoder.conv_in", c.z_dim, stages.front().in_dim, 3);
    s.mid_block("decoder.mid_block", stages.front().in_dim);
    for (size_t i = 0; i < stages.size(); ++i) {
        const auto & b = stages[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
            s.resblock(p + ".resnets." + std::to_string(r), cur, b.out_dim);
            cur = b.out_dim;
        }
        if (b.resample) {
            s.conv(p + ".upsampler.resample.1", b.out_dim, b.out_dim, 3);
            // time_conv of upsample3d only acts on later frames; images never use it but it must be well-formed.
            if (b.temporal) s.conv(p + ".upsampler.time_conv", b.out_dim, 2 * b.out_dim, 1);
        }
    }
    spec["decoder.norm_out.gamma"] = {stages.back().out_dim, 1, 1, 1};
    s.conv("decoder.conv_out", stages.back().out_dim, c.out_channels, 3);
    return spec;
}

void validate_vae_checkpoint(const TensorFile & f, const VaeConfig & c, const VaeWeightSpec & part) {
    for (const auto & [name, shape] : part) f.check(name, shape);
    const auto enc = vae_encoder_spec(c), dec = vae_decoder_spec(c);
    for (const auto & name : f.names())
        if (!enc.count(name) && !dec.count(name))
            throw RuntimeError(f.file_of(name).string() + ": unexpected tensor '" + name +
                               "': the vae config.json contradicts the weights");
}

VaeLayers::VaeLayers(const TensorFile & f, const VaeConfig & c, const VaeWeightSpec & spec, at::ScalarType dtype,
                     at::Device device, bool leaf_offload)
    : device_(device), offload_(leaf_offload) {
    validate_vae_checkpoint(f, c, spec);
    for (const auto & [name, shape] : spec) {
        if (name.find("time_conv") != std::string::npos) continue;  // validated, unused for single frames
        auto t = f.weight(name, shape, dtype);
        weights_[name] = offload_ ? (device_.is_cuda() ? t.pin_memory() : t) : t.to(device_);
    }
}

uint64_t VaeLayers::weight_bytes() const {
    uint64_t b = 0;
    for (auto & [n, t] : weights_) b += uint64_t(t.numel()) * t.element_size();
    return b;
}

at::Tensor VaeLayers::w(const std::string & name) const {
    const auto & t = weights_.at(name);
    if (!offload_) return t;
    ++uploads_;
    return t.to(device_, /*non_blocking=*/device_.is_cuda());
}

at::Tensor VaeLayers::causal_conv(const at::Tensor & x, const std::string & p, int64_t pad) const {
    auto y = x.squeeze(2);
    if (pad) y = at::constant_pad_nd(y, {pad, pad, pad, pad}, 0);
    y = at::conv2d(y, w(p + ".weight"), w(p + ".bias"));
    return y.unsqueeze(2);
}

// QwenImage21RMS_norm: F.normalize over channels * sqrt(C) * gamma (fp32 normalize for half types).
at::Tensor VaeLayers::rms_norm(const at::Tensor & x, const std::string & p) const {
    const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    auto xf = half ? x.to(at::kFloat) : x;
    auto denom = at::linalg_vector_norm(xf, 2, at::IntArrayRef{1}, true).clamp_min(1e-12).expand_as(xf);
    auto normalized = (xf / denom).to(x.scalar_type());
    auto gamma = w(p + ".gamma");
    const double scale = std::sqrt(double(x.size(1)));
    return normalized * scale * gamma;
}

at::Tensor VaeLayers::residual_block(const at::Tensor & x, const std::string & p, bool shortcut) const {
    auto h = shortcut ? causal_conv(x, p + ".conv_shortcut", 0) : x;
    auto y = at::silu(rms_norm(x, p + ".norm1"));
    y = causal_conv(y, p + ".conv1", 1);
    y = at::silu(rms_norm(y, p + ".norm2"));
    y = causal_conv(y, p + ".conv2", 1);
    return y + h;
}

at::Tensor VaeLayers::attention_block(const at::Tensor & x, const std::string & p) const {
    const auto B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
    auto y = x.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
    y = rms_norm(y, p + ".norm");
    auto qkv = at::conv2d(y, w(p + ".to_qkv.weight"), w(p + ".to_qkv.bias"));
    qkv = qkv.reshape({B * T, 1, C * 3, -1}).permute({0, 1, 3, 2}).contiguous();
    auto parts = qkv.chunk(3, -1);
    auto a = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
    a = a.squeeze(1).permute({0, 2, 1}).reshape({B * T, C, H, W});
    a = at::conv2d(a, w(p + ".proj.weight"), w(p + ".proj.bias"));
    a = a.view({B, T, C, H, W}).permute({0, 2, 1, 3, 4});
    return a + x;
}

at::Tensor VaeLayers::mid_block(const at::Tensor & x, const std::string & p) const {
    auto y = residual_block(x, p + ".resnets.0", false);
    y = attention_block(y, p + ".attentions.0");
    return residual_block(y, p + ".resnets.1", false);
}

at::Tensor blend_tiles(std::vector<std::vector<at::Tensor>> & rows, int64_t blend_h, int64_t blend_w,
                       int64_t stride_h, int64_t stride_w, int64_t height, int64_t width) {
    auto blend = [](const at::Tensor & a, at::Tensor & b, int64_t extent, int64_t dim) {
        extent = std::min({a.size(dim), b.size(dim), extent});
        for (int64_t y = 0; y < extent; ++y) {
            auto bs = b.select(dim, y);
            bs.copy_(a.select(dim, a.size(dim) - extent + y) * (1.0 - double(y) / double(extent)) +
                     bs * (double(y) / double(extent)));
        }
    };
    std::vector<at::Tensor> result_rows;
    for (size_t i = 0; i < rows.size(); ++i) {
        std::vector<at::Tensor> result_row;
        for (size_t j = 0; j < rows[i].size(); ++j) {
            auto & tile = rows[i][j];
            if (i > 0) blend(rows[i - 1][j], tile, blend_h, 3);
            if (j > 0) blend(rows[i][j - 1], tile, blend_w, 4);
            result_row.push_back(tile.slice(3, 0, stride_h).slice(4, 0, stride_w));
        }
        result_rows.push_back(at::cat(result_row, -1));
    }
    return at::cat(result_rows, 3).slice(3, 0, height).slice(4, 0, width);
}

}  // namespace ddo::qwen_image_21
