#include "vae_decoder.hpp"

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {

VaeDecoder::VaeDecoder(const TensorFile & f, VaeConfig config, at::ScalarType dtype, at::Device device,
                       VaeStrategy strategy, VaeTiling tiling)
    : config_(std::move(config)), strategy_(strategy), dtype_(dtype), tiling_(tiling), device_(device),
      layers_(f, config_, vae_decoder_spec(config_), dtype, device, strategy == VaeStrategy::leaf_offload),
      up_blocks_(vae_up_stages(config_)) {}

at::Tensor VaeDecoder::decoder(const at::Tensor & z) const {
    const auto & L = layers_;
    auto x = L.causal_conv(z, "decoder.conv_in", 1);
    x = L.mid_block(x, "decoder.mid_block");
    if (stage_check_) stage_check_("decoder.mid_block");
    for (size_t i = 0; i < up_blocks_.size(); ++i) {
        const auto & b = up_blocks_[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        auto x_copy = x.clone();
        int64_t cur = b.in_dim;
        for (int64_t r = 0; r <= config_.num_res_blocks; ++r) {
            x = L.residual_block(x, p + ".resnets." + std::to_string(r), cur != b.out_dim);
            cur = b.out_dim;
        }
        if (b.resample) {
            // QwenImage21Resample (first frame: the temporal conv is skipped), per frame in 2D.
            const auto B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
            auto y = x.permute({0, 2, 1, 3, 4}).reshape({B * T, C, H, W});
            y = at::_upsample_nearest_exact2d(y.to(at::kFloat), {2 * H, 2 * W}, 2.0, 2.0).to(y.scalar_type());
            y = at::conv2d(y, L.w(p + ".upsampler.resample.1.weight"), L.w(p + ".upsampler.resample.1.bias"),
                           {1, 1}, {1, 1});
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
        if (stage_check_) stage_check_(p);
    }
    x = at::silu(L.rms_norm(x, "decoder.norm_out"));
    return L.causal_conv(x, "decoder.conv_out", 1);
}

at::Tensor VaeDecoder::decode_plain(const at::Tensor & z) const {
    auto x = layers_.causal_conv(z.to(device_), "post_quant_conv", 0);
    return at::clamp(decoder(x.slice(2, 0, 1)), -1.0, 1.0);
}

// AutoencoderKLQwenImage21.tiled_decode: latent tiles of tile_sample_min / 16 every tile_sample_stride / 16,
// blended over tile_sample_min - tile_sample_stride pixels.
at::Tensor VaeDecoder::decode_tiled(const at::Tensor & zin) const {
    auto z = zin.to(device_);
    const int64_t height = z.size(3), width = z.size(4), r = config_.scale_factor_spatial;
    const int64_t tmin_h = tiling_.tile_sample_min_height / r, tmin_w = tiling_.tile_sample_min_width / r;
    const int64_t tstride_h = tiling_.tile_sample_stride_height / r, tstride_w = tiling_.tile_sample_stride_width / r;
    if (tstride_h <= 0 || tstride_w <= 0 || tmin_h <= 0 || tmin_w <= 0)
        throw UsageError("qwen_image_21: VAE tile sizes and strides must be at least one latent (" +
                         std::to_string(r) + " px)");
    std::vector<std::vector<at::Tensor>> rows;
    const int total = int(((height + tstride_h - 1) / tstride_h) * ((width + tstride_w - 1) / tstride_w));
    int done = 0;
    for (int64_t i = 0; i < height; i += tstride_h) {
        std::vector<at::Tensor> row;
        for (int64_t j = 0; j < width; j += tstride_w) {
            auto tile = z.slice(2, 0, 1).slice(3, i, i + tmin_h).slice(4, j, j + tmin_w);
            tile = layers_.causal_conv(tile, "post_quant_conv", 0);
            row.push_back(decoder(tile));
            if (on_tile_) on_tile_(++done, total);
        }
        rows.push_back(std::move(row));
    }
    auto dec = blend_tiles(rows, tiling_.tile_sample_min_height - tiling_.tile_sample_stride_height,
                           tiling_.tile_sample_min_width - tiling_.tile_sample_stride_width,
                           tiling_.tile_sample_stride_height, tiling_.tile_sample_stride_width, height * r, width * r);
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
