#include "vae_decoder.hpp"

#include <cmath>
#include <set>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {

VaeDecoder::VaeDecoder(const TensorFile & f, VaeConfig config, at::ScalarType dtype, at::Device device,
                       VaeStrategy strategy, VaeTiling tiling)
    : config_(std::move(config)), strategy_(strategy), dtype_(dtype), tiling_(tiling), device_(device) {
    const auto & c = config_;
    const int64_t n = int64_t(c.dim_mult.size());
    std::vector<int64_t> dims{c.decoder_base_dim * c.dim_mult.back()};
    for (int64_t i = n - 1; i >= 0; --i) dims.push_back(c.decoder_base_dim * c.dim_mult[i]);
    std::map<std::string, std::vector<int64_t>> spec;
    auto conv = [&](const std::string & p, int64_t in, int64_t out, int64_t k) {
        spec[p + ".weight"] = {out, in, k, k};
        spec[p + ".bias"] = {out};
    };
    auto resblock = [&](const std::string & p, int64_t in, int64_t out) {
        spec[p + ".norm1.gamma"] = {in, 1, 1, 1};
        conv(p + ".conv1", in, out, 3);
        spec[p + ".norm2.gamma"] = {out, 1, 1, 1};
        conv(p + ".conv2", out, out, 3);
        if (in != out) conv(p + ".conv_shortcut", in, out, 1);
    };
    conv("post_quant_conv", c.z_dim, c.z_dim, 1);
    conv("decoder.conv_in", c.z_dim, dims[0], 3);
    resblock("decoder.mid_block.resnets.0", dims[0], dims[0]);
    resblock("decoder.mid_block.resnets.1", dims[0], dims[0]);
    spec["decoder.mid_block.attentions.0.norm.gamma"] = {dims[0], 1, 1};
    conv("decoder.mid_block.attentions.0.to_qkv", dims[0], 3 * dims[0], 1);
    conv("decoder.mid_block.attentions.0.proj", dims[0], dims[0], 1);
    std::vector<bool> temporal_up(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
    for (int64_t i = 0; i < n; ++i) {
        UpBlock b{dims[i], dims[i + 1], i != n - 1, false};
        if (b.up_flag) b.temporal = temporal_up[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
            resblock(p + ".resnets." + std::to_string(r), cur, b.out_dim);
            cur = b.out_dim;
        }
        if (b.up_flag) {
            conv(p + ".upsampler.resample.1", b.out_dim, b.out_dim, 3);
            // time_conv of upsample3d only acts on later frames; images never use it but it must be well-formed.
            if (b.temporal) conv(p + ".upsampler.time_conv", b.out_dim, 2 * b.out_dim, 1);
        }
        up_blocks_.push_back(b);
    }
    spec["decoder.norm_out.gamma"] = {dims.back(), 1, 1, 1};
    conv("decoder.conv_out", dims.back(), c.out_channels, 3);

    const bool offload = strategy_ == VaeStrategy::leaf_offload;
    for (auto & [name, shape] : spec) {
        auto t = f.weight(name, shape, dtype);
        if (name.find("time_conv") != std::string::npos) continue;  // validated, unused for single frames
        weights_[name] = offload ? (device_.is_cuda() ? t.pin_memory() : t) : t.to(device_);
    }
    for (const auto & name : f.names())
        if (!spec.count(name) && name.rfind("encoder.", 0) != 0 && name.rfind("quant_conv.", 0) != 0)
            throw RuntimeError(f.file_of(name).string() + ": unexpected tensor '" + name +
                               "': the vae config.json contradicts the weights");
}

uint64_t VaeDecoder::weight_bytes() const {
    uint64_t b = 0;
    for (auto & [n, t] : weights_) b += uint64_t(t.numel()) * t.element_size();
    return b;
}

at::Tensor VaeDecoder::w(const std::string & name) const {
    const auto & t = weights_.at(name);
    if (strategy_ != VaeStrategy::leaf_offload) return t;
    ++uploads_;
    return t.to(device_, /*non_blocking=*/device_.is_cuda());
}

// QwenImage21CausalConv3d: Conv2d on the squeezed frame with explicit zero padding.
at::Tensor VaeDecoder::causal_conv(const at::Tensor & x, const std::string & p, int64_t pad) const {
    auto y = x.squeeze(2);
    if (pad) y = at::constant_pad_nd(y, {pad, pad, pad, pad}, 0);
    y = at::conv2d(y, w(p + ".weight"), w(p + ".bias"));
    return y.unsqueeze(2);
}

// QwenImage21RMS_norm: F.normalize over channels * sqrt(C) * gamma.
at::Tensor VaeDecoder::rms_norm(const at::Tensor & x, const std::string & p) const {
    const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    auto xf = half ? x.to(at::kFloat) : x;
    auto denom = at::linalg_vector_norm(xf, 2, at::IntArrayRef{1}, true).clamp_min(1e-12).expand_as(xf);
    auto normalized = (xf / denom).to(x.scalar_type());
    auto gamma = w(p + ".gamma");
    const double scale = std::sqrt(double(x.size(1)));
    return normalized * scale * gamma;
}

at::Tensor VaeDecoder::residual_block(const at::Tensor & x, const std::string & p, bool shortcut) const {
    auto h = shortcut ? causal_conv(x, p + ".conv_shortcut", 0) : x;
    auto y = at::silu(rms_norm(x, p + ".norm1"));
    y = causal_conv(y, p + ".conv1", 1);
    y = at::silu(rms_norm(y, p + ".norm2"));
    y = causal_conv(y, p + ".conv2", 1);
    return y + h;
}

at::Tensor VaeDecoder::attention_block(const at::Tensor & x, const std::string & p) const {
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

at::Tensor VaeDecoder::decoder(const at::Tensor & z) const {
    auto x = causal_conv(z, "decoder.conv_in", 1);
    x = residual_block(x, "decoder.mid_block.resnets.0", false);
    x = attention_block(x, "decoder.mid_block.attentions.0");
    x = residual_block(x, "decoder.mid_block.resnets.1", false);
    for (size_t i = 0; i < up_blocks_.size(); ++i) {
        const auto & b = up_blocks_[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        auto x_copy = x.clone();
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r <= config_.num_res_blocks; ++r) {
            x = residual_block(x, p + ".resnets." + std::to_string(r), cur != b.out_dim);
            cur = b.out_dim;
        }
        if (b.up_flag) {
            // QwenImage21Resample (first frame: the temporal conv is skipped), per frame in 2D.
            const auto B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
            auto y = x.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
            y = at::_upsample_nearest_exact2d(y.to(at::kFloat), {2 * H, 2 * W}, 2.0, 2.0).to(y.scalar_type());
            y = at::conv2d(y, w(p + ".upsampler.resample.1.weight"), w(p + ".upsampler.resample.1.bias"), {1, 1},
                           {1, 1});
            x = y.view({B, T, y.size(1), y.size(2), y.size(3)}).permute({0, 2, 1, 3, 4});
            // QwenImage21DupUp3D shortcut with first_chunk=True.
            const int64_t ft = b.temporal ? 2 : 1, fs = 2;
            const int64_t repeats = b.out_dim * ft * fs * fs / b.in_dim;
            auto s = x_copy.repeat_interleave(repeats, 1);
            const auto Ts = s.size(2), Hs = s.size(3), Ws = s.size(4);
            s = s.view({s.size(0), b.out_dim, ft, fs, fs, Ts, Hs, Ws}).permute({0, 1, 5, 2, 6, 3, 7, 4}).contiguous();
            s = s.view({s.size(0), b.out_dim, Ts * ft, Hs * fs, Ws * fs});
            s = s.slice(2, ft - 1);
            x = x + s;
        }
    }
    x = at::silu(rms_norm(x, "decoder.norm_out"));
    return causal_conv(x, "decoder.conv_out", 1);
}

at::Tensor VaeDecoder::decode_plain(const at::Tensor & z) const {
    auto x = causal_conv(z.to(device_), "post_quant_conv", 0);
    return at::clamp(decoder(x.slice(2, 0, 1)), -1.0, 1.0);
}

at::Tensor VaeDecoder::decode_tiled(const at::Tensor & zin) const {
    auto z = zin.to(device_);
    const int64_t height = z.size(3), width = z.size(4), r = config_.scale_factor_spatial;
    const int64_t sample_h = height * r, sample_w = width * r;
    const int64_t tmin_h = tiling_.tile_sample_min_height / r, tmin_w = tiling_.tile_sample_min_width / r;
    const int64_t tstride_h = tiling_.tile_sample_stride_height / r, tstride_w = tiling_.tile_sample_stride_width / r;
    const int64_t blend_h = tiling_.tile_sample_min_height - tiling_.tile_sample_stride_height;
    const int64_t blend_w = tiling_.tile_sample_min_width - tiling_.tile_sample_stride_width;
    if (tstride_h <= 0 || tstride_w <= 0 || tmin_h <= 0 || tmin_w <= 0)
        throw UsageError("qwen_image_21: VAE tile sizes and strides must be at least one latent (" +
                         std::to_string(r) + " px)");
    std::vector<std::vector<at::Tensor>> rows;
    for (int64_t i = 0; i < height; i += tstride_h) {
        std::vector<at::Tensor> row;
        for (int64_t j = 0; j < width; j += tstride_w) {
            auto tile = z.slice(2, 0, 1).slice(3, i, i + tmin_h).slice(4, j, j + tmin_w);
            tile = causal_conv(tile, "post_quant_conv", 0);
            row.push_back(decoder(tile));
        }
        rows.push_back(std::move(row));
    }
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
            result_row.push_back(
                tile.slice(3, 0, tiling_.tile_sample_stride_height).slice(4, 0, tiling_.tile_sample_stride_width));
        }
        result_rows.push_back(at::cat(result_row, -1));
    }
    auto dec = at::cat(result_rows, 3).slice(3, 0, sample_h).slice(4, 0, sample_w);
    return at::clamp(dec, -1.0, 1.0);
}

at::Tensor VaeDecoder::decode(const at::Tensor & z) const {
    if (strategy_ == VaeStrategy::tiled) {
        const int64_t r = config_.scale_factor_spatial;
        if (z.size(4) > tiling_.tile_sample_min_width / r || z.size(3) > tiling_.tile_sample_min_height / r)
        {
            last_tiled_ = true;
            return decode_tiled(z);
        }
    }
    last_tiled_ = false;
    return decode_plain(z);
}

}  // namespace ddo::qwen_image_21
