// LatentUpsampler: LTX2LatentUpsamplerModel.forward (dims 3) with ResBlock, PixelShuffleND, BlurDownsample and
// SpatialRationalResampler in ATen; the two-stage latent chain around it (LTX2Pipeline._unpack_latents /
// _denormalize_latents / _normalize_latents, LTX2LatentUpsamplePipeline.adain_filter_latent / tone_map_latents).
// Reference: diffusers pipelines/ltx2/latent_upsampler.py, pipeline_ltx2_latent_upsample.py, pipeline_ltx2.py.
#include "latent_upsampler.hpp"

#include <string>
#include <vector>

#include "ddo/error.hpp"
#include "video_vae_decoder.hpp"

namespace ddo::ltx2 {
namespace {

// PixelShuffleND(2): b (c p1 p2) h w -> b c (h p1) (w p2).
at::Tensor shuffle_2d(const at::Tensor & x, int64_t r) {
    return x.unflatten(1, {-1, r, r}).permute({0, 1, 4, 2, 5, 3}).flatten(4, 5).flatten(2, 3);
}

// PixelShuffleND(3), factors (2, 2, 2): b (c p1 p2 p3) d h w -> b c (d p1) (h p2) (w p3).
at::Tensor shuffle_3d(const at::Tensor & x) {
    return x.unflatten(1, {-1, 2, 2, 2}).permute({0, 1, 5, 2, 6, 3, 7, 4}).flatten(6, 7).flatten(4, 5).flatten(2, 3);
}

// PixelShuffleND(1), factor 2: b (c p1) f h w -> b c (f p1) h w.
at::Tensor shuffle_1d(const at::Tensor & x) {
    return x.unflatten(1, {-1, 2}).permute({0, 1, 3, 2, 4, 5}).flatten(2, 3);
}

// BlurDownsample's kernel: the outer product of [1, 4, 6, 4, 1] normalised to sum 1, [1, 1, 5, 5].
at::Tensor binomial_kernel(const at::TensorOptions & opts) {
    const auto k = at::tensor({1.0, 4.0, 6.0, 4.0, 1.0}, at::TensorOptions().dtype(at::kFloat));
    const auto k2 = at::outer(k, k);
    return (k2 / k2.sum()).view({1, 1, 5, 5}).to(opts);
}

void require_5d(const at::Tensor & x, int64_t channels, const std::string & what) {
    if (x.dim() != 5 || x.size(1) != channels)
        throw UsageError(what + " must be [B, " + std::to_string(channels) + ", F, H, W] (the video VAE's latent "
                         "channels), got " + model::shape_str(x.sizes()));
}

}  // namespace

LatentUpsampler::LatentUpsampler(LatentUpsamplerConfig config, Weights & weights)
    : config_(std::move(config)), w_(weights) {}

at::Tensor LatentUpsampler::conv(const at::Tensor & x, const std::string & p) const {
    const auto weight = w_.get(p + ".weight");
    const auto bias = w_.get(p + ".bias");
    if (weight.dim() == 4) return at::conv2d(x, weight, bias, {1, 1}, {1, 1});
    return at::conv3d(x, weight, bias, {1, 1, 1}, {1, 1, 1});
}

at::Tensor LatentUpsampler::group_norm(const at::Tensor & x, const std::string & p) const {
    return at::group_norm(x, 32, w_.get(p + ".weight"), w_.get(p + ".bias"), 1e-5);
}

// ResBlock: conv1 -> norm1 -> SiLU -> conv2 -> norm2 -> SiLU(h + residual).
at::Tensor LatentUpsampler::res_block(const at::Tensor & x, const std::string & p) const {
    Weights::Scope s(w_, p);
    auto h = at::silu(group_norm(conv(x, p + ".conv1"), p + ".norm1"));
    h = group_norm(conv(h, p + ".conv2"), p + ".norm2");
    return at::silu(h + x);
}

at::Tensor LatentUpsampler::upsample(const at::Tensor & x) const {
    Weights::Scope s(w_, "upsampler");
    const auto & c = config_;
    switch (c.kind) {
    case LatentUpsamplerKind::temporal: return shuffle_1d(conv(x, "upsampler.0")).narrow(2, 1, 2 * x.size(2) - 1);
    case LatentUpsamplerKind::spatiotemporal:
        return shuffle_3d(conv(x, "upsampler.0")).narrow(2, 1, 2 * x.size(2) - 1);
    case LatentUpsamplerKind::spatial:
    case LatentUpsamplerKind::spatial_rational: break;
    }
    // Per frame: [B, C, F, H, W] -> [B * F, C, H, W] and back.
    const int64_t b = x.size(0);
    auto h = x.permute({0, 2, 1, 3, 4}).flatten(0, 1);
    if (c.kind == LatentUpsamplerKind::spatial) {
        h = shuffle_2d(conv(h, "upsampler.0"), 2);
    } else {
        h = shuffle_2d(conv(h, "upsampler.conv"), c.num);
        if (c.den != 1) {  // BlurDownsample(dims=2, stride=den): depthwise binomial blur with stride
            const auto kernel = w_.contains(kLatentUpsamplerBlurKernel) ? w_.get(kLatentUpsamplerBlurKernel)
                                                                        : binomial_kernel(h.options());
            const int64_t ch = h.size(1);
            h = at::conv2d(h, kernel.expand({ch, 1, 5, 5}), {}, {c.den, c.den}, {2, 2}, {1, 1}, ch);
        }
    }
    return h.unflatten(0, {b, -1}).permute({0, 2, 1, 3, 4});
}

at::Tensor LatentUpsampler::forward(const at::Tensor & x_in) const {
    require_5d(x_in, config_.in_channels, "the latent upsampler's input (" + config_.file.string() + ")");
    auto x = x_in.to(w_.device(), w_.dtype()).contiguous();  // the reference's input is contiguous (see below)
    {
        Weights::Scope s(w_, "initial");
        x = at::silu(group_norm(conv(x, "initial_conv"), "initial_norm"));
    }
    for (int64_t i = 0; i < config_.num_blocks_per_stage; ++i) x = res_block(x, "res_blocks." + std::to_string(i));
    x = upsample(x);
    for (int64_t i = 0; i < config_.num_blocks_per_stage; ++i)
        x = res_block(x, "post_upsample_res_blocks." + std::to_string(i));
    Weights::Scope s(w_, "final_conv");
    return conv(x, "final_conv");
}

at::Tensor upsample_video_latents(const LatentUpsampler & upsampler, const at::Tensor & latents,
                                  const VideoLatentStats & stats, double scaling_factor,
                                  const LatentUpsampleOptions & options) {
    const auto & c = upsampler.config();
    require_5d(latents, c.in_channels, "the video latents to upsample");
    const double tone = options.tone_map_compression_ratio;
    if (!(tone >= 0.0 && tone <= 1.0))
        throw UsageError("tone_map_compression_ratio is " + std::to_string(tone) + ", it must be in [0, 1] (0 = off)");
    // LTX2Pipeline(output_type="latent"): the float32 loop latents de-normalised; the upsample pipeline casts them
    // to the upsampler's dtype.
    const auto x = denormalize_video_latents(latents.to(upsampler.device(), at::kFloat), stats.mean, stats.std,
                                             scaling_factor)
                       .to(upsampler.dtype());
    auto y = upsampler.forward(x);
    if (options.adain_factor > 0.0) {
        // adain_filter_latent: each (sample, channel) of y moved to x's mean and (unbiased) std, then lerp by factor.
        const auto [r_sd, r_mean] = at::std_mean(x, {2, 3, 4}, /*unbiased=*/true, /*keepdim=*/true);
        const auto [i_sd, i_mean] = at::std_mean(y, {2, 3, 4}, /*unbiased=*/true, /*keepdim=*/true);
        const auto filtered = (y - i_mean) / i_sd * r_sd + r_mean;
        y = at::lerp(y, filtered, options.adain_factor);
    }
    if (tone > 0.0) {
        // tone_map_latents: scales = 1 - 0.8 s sigmoid(4 s (|y| - 1)), s = 0.75 ratio.
        const double s = tone * 0.75;
        y = y * (1.0 - 0.8 * s * at::sigmoid(4.0 * s * (y.abs() - 1.0)));
    }
    // LTX2Pipeline.prepare_latents with 5-D latents: normalised in their dtype.
    return normalize_video_latents(y, stats.mean, stats.std, scaling_factor);
}

at::Tensor upsample_video_latents(const LatentUpsampler & upsampler, const at::Tensor & packed, int64_t latent_frames,
                                  int64_t latent_height, int64_t latent_width, const VideoLatentStats & stats,
                                  double scaling_factor, const LatentUpsampleOptions & options) {
    const int64_t tokens = latent_frames * latent_height * latent_width;
    if (packed.dim() != 3 || packed.size(1) != tokens || packed.size(2) != upsampler.config().in_channels)
        throw UsageError("the packed video latents to upsample must be [B, " + std::to_string(tokens) + ", " +
                         std::to_string(upsampler.config().in_channels) + "] (" + std::to_string(latent_frames) +
                         " x " + std::to_string(latent_height) + " x " + std::to_string(latent_width) +
                         " latent pixels), got " + model::shape_str(packed.sizes()));
    // _unpack_latents, patch size 1: [B, F H W, C] -> [B, C, F, H, W], contiguous as the reference's flatten leaves
    // it (a permuted view keeps its channels-last strides through element-wise ops and sends the convolutions down
    // another kernel: 2.7e-6 off instead of 0; forward makes its input contiguous for the same reason).
    const auto x = packed.reshape({packed.size(0), latent_frames, latent_height, latent_width, -1})
                       .permute({0, 4, 1, 2, 3})
                       .contiguous();
    return upsample_video_latents(upsampler, x, stats, scaling_factor, options);
}

}  // namespace ddo::ltx2
