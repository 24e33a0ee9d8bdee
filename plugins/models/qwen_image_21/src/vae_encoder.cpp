#include "vae_encoder.hpp"

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

// QwenImage21AvgDown3D: pad the front of time to a multiple of factor_t (the single frame gets a zero frame
// before it when factor_t = 2), fold factor_t x factor_s x factor_s into channels, average groups of them.
at::Tensor avg_down(const at::Tensor & x, int64_t out_channels, int64_t factor_t, int64_t factor_s) {
    const int64_t pad_t = (factor_t - x.size(2) % factor_t) % factor_t;
    auto y = at::constant_pad_nd(x, {0, 0, 0, 0, pad_t, 0}, 0);
    const auto B = y.size(0), C = y.size(1), T = y.size(2), H = y.size(3), W = y.size(4);
    const int64_t factor = factor_t * factor_s * factor_s;
    y = y.reshape({B, C, T / factor_t, factor_t, H / factor_s, factor_s, W / factor_s, factor_s});
    y = y.permute({0, 1, 3, 5, 7, 2, 4, 6}).contiguous();
    y = y.view({B, C * factor, T / factor_t, H / factor_s, W / factor_s});
    y = y.view({B, out_channels, C * factor / out_channels, T / factor_t, H / factor_s, W / factor_s});
    return y.mean(2);
}

}  // namespace

VaeEncoder::VaeEncoder(const TensorFile & f, VaeConfig config, at::ScalarType dtype, at::Device device,
                       VaeStrategy strategy, VaeTiling tiling)
    : config_(std::move(config)), strategy_(strategy), dtype_(dtype), tiling_(tiling), device_(device),
      layers_(f, config_, vae_encoder_spec(config_), dtype, device, strategy == VaeStrategy::leaf_offload),
      down_blocks_(vae_down_stages(config_)) {
    const int64_t r = config_.scale_factor_spatial;
    for (int64_t v : {tiling_.tile_sample_min_height, tiling_.tile_sample_min_width,
                      tiling_.tile_sample_stride_height, tiling_.tile_sample_stride_width})
        if (v <= 0 || v % r != 0)
            throw UsageError("qwen_image_21: VAE encoder tile sizes and strides must be positive multiples of " +
                             std::to_string(r) + " px (got " + std::to_string(v) +
                             "); every tile is encoded on its own and must downsample to whole latents");
}

at::Tensor VaeEncoder::check_input(const at::Tensor & pixels) const {
    const int64_t r = config_.scale_factor_spatial;
    if (pixels.dim() != 5 || pixels.size(1) != config_.in_channels || pixels.size(2) != 1 ||
        pixels.size(3) % r != 0 || pixels.size(4) % r != 0 || pixels.size(3) == 0 || pixels.size(4) == 0)
        throw UsageError("qwen_image_21: the VAE encoder takes one frame [B, " + std::to_string(config_.in_channels) +
                         ", 1, H, W] with H and W positive multiples of " + std::to_string(r) + "; got " +
                         shape_str(pixels.sizes()) + " (resize the condition image first)");
    return pixels.to(device_, dtype_);
}

at::Tensor VaeEncoder::encoder(const at::Tensor & x) const {
    const auto & L = layers_;
    auto h = L.causal_conv(x, "encoder.conv_in", 1);
    for (size_t i = 0; i < down_blocks_.size(); ++i) {
        const auto & b = down_blocks_[i];
        const std::string p = "encoder.down_blocks." + std::to_string(i);
        const auto shortcut = h;
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r < config_.num_res_blocks; ++r) {
            h = L.residual_block(h, p + ".resnets." + std::to_string(r), cur != b.out_dim);
            cur = b.out_dim;
        }
        if (b.resample) {
            // QwenImage21Resample downsample2d/3d, per frame: ZeroPad2d((0, 1, 0, 1)) then a stride-2 3x3 conv
            // (the first frame only fills the temporal cache; time_conv acts on later frames).
            const auto B = h.size(0), C = h.size(1), T = h.size(2), H = h.size(3), W = h.size(4);
            auto y = h.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
            y = at::constant_pad_nd(y, {0, 1, 0, 1}, 0);
            y = at::conv2d(y, L.w(p + ".downsampler.resample.1.weight"), L.w(p + ".downsampler.resample.1.bias"),
                           {2, 2});
            h = y.view({B, T, y.size(1), y.size(2), y.size(3)}).permute({0, 2, 1, 3, 4});
        }
        h = h + avg_down(shortcut, b.out_dim, b.temporal ? 2 : 1, b.resample ? 2 : 1);
    }
    h = L.mid_block(h, "encoder.mid_block");
    h = at::silu(L.rms_norm(h, "encoder.norm_out"));
    h = L.causal_conv(h, "encoder.conv_out", 1);
    return L.causal_conv(h, "quant_conv", 0);
}

// DiagonalGaussianDistribution(moments).mode(): the mean, i.e. the first z_dim channels.
at::Tensor VaeEncoder::mode(const at::Tensor & moments) const {
    return moments.slice(1, 0, config_.z_dim).contiguous();
}

at::Tensor VaeEncoder::encode_plain(const at::Tensor & pixels) const { return mode(encoder(check_input(pixels))); }

// AutoencoderKLQwenImage21.tiled_encode: pixel tiles of tile_sample_min every tile_sample_stride, each encoded
// on its own (through quant_conv), blended in latent space over (min - stride) / 16 latents.
at::Tensor VaeEncoder::encode_tiled(const at::Tensor & pixels) const {
    auto x = check_input(pixels);
    const int64_t r = config_.scale_factor_spatial, height = x.size(3), width = x.size(4);
    const int64_t tmin_h = tiling_.tile_sample_min_height / r, tmin_w = tiling_.tile_sample_min_width / r;
    const int64_t tstride_h = tiling_.tile_sample_stride_height / r, tstride_w = tiling_.tile_sample_stride_width / r;
    std::vector<std::vector<at::Tensor>> rows;
    for (int64_t i = 0; i < height; i += tiling_.tile_sample_stride_height) {
        std::vector<at::Tensor> row;
        for (int64_t j = 0; j < width; j += tiling_.tile_sample_stride_width) {
            auto tile = x.slice(2, 0, 1)
                            .slice(3, i, i + tiling_.tile_sample_min_height)
                            .slice(4, j, j + tiling_.tile_sample_min_width);
            row.push_back(encoder(tile));
        }
        rows.push_back(std::move(row));
    }
    return mode(blend_tiles(rows, tmin_h - tstride_h, tmin_w - tstride_w, tstride_h, tstride_w, height / r,
                            width / r));
}

at::Tensor VaeEncoder::encode(const at::Tensor & pixels) const {
    if (strategy_ == VaeStrategy::tiled && pixels.dim() == 5 &&
        (pixels.size(4) > tiling_.tile_sample_min_width || pixels.size(3) > tiling_.tile_sample_min_height)) {
        last_tiled_ = true;
        return encode_tiled(pixels);
    }
    last_tiled_ = false;
    return encode_plain(pixels);
}

at::Tensor VaeEncoder::encode_normalized(const at::Tensor & pixels) const {
    return normalize_image_latents(config_, encode(pixels));
}

at::Tensor normalize_image_latents(const VaeConfig & c, const at::Tensor & latents) {
    auto mean = at::tensor(c.latents_mean, at::kFloat).view({1, c.z_dim, 1, 1, 1}).to(latents.options());
    auto std = at::tensor(c.latents_std, at::kFloat).view({1, c.z_dim, 1, 1, 1}).to(latents.options());
    return (latents - mean) / std;
}

}  // namespace ddo::qwen_image_21
