// VideoVaeEncoder: LTX2VideoEncoder3d.forward, LTX2VideoDownBlock3D, LTX2VideoDownsampler3d and
// LTX2VideoMidBlock3d in ATen (the convolution, norm and resnet are video_vae_layers'), reading every weight inside
// the Scope of its leaf module; AutoencoderKLLTX2Video.encode + DiagonalGaussianDistribution.mode. Reference:
// diffusers autoencoder_kl_ltx2.py, vae.py.
#include "video_vae_encoder.hpp"

#include "ddo/error.hpp"
#include "video_vae_layers.hpp"

namespace ddo::ltx2 {
namespace {

// unflatten(4, (-1, s_w)).unflatten(3, (-1, s_h)).unflatten(2, (-1, s_t)).permute(0, 1, 3, 5, 7, 2, 4, 6)
// .flatten(1, 4): space-to-depth with the channel order (c, s_t, s_h, s_w).
at::Tensor space_to_depth(const at::Tensor & x, const std::array<int64_t, 3> & s) {
    return x.unflatten(4, {-1, s[2]})
        .unflatten(3, {-1, s[1]})
        .unflatten(2, {-1, s[0]})
        .permute({0, 1, 3, 5, 7, 2, 4, 6})
        .flatten(1, 4);
}

}  // namespace

std::vector<model::GroupSpec> video_vae_encoder_leaf_groups(const VideoVaeConfig & c) {
    return video_vae_groups_of(video_vae_encoder_specs(c));
}

at::Tensor normalize_video_latents(const at::Tensor & latents, const at::Tensor & mean, const at::Tensor & std,
                                   double scaling_factor) {
    const auto opts = latents.options();
    const auto m = mean.to(opts).view({1, -1, 1, 1, 1});
    const auto s = std.to(opts).view({1, -1, 1, 1, 1});
    return (latents - m) * scaling_factor / s;
}

VideoVaeEncoder::VideoVaeEncoder(VideoVaeConfig config, Weights & weights) : config_(std::move(config)), w_(weights) {
    config_.require_encoder("encoding");
}

at::Tensor VideoVaeEncoder::conv(const at::Tensor & x, const std::string & p, int64_t stride) const {
    return video_vae_causal_conv(w_, x, p, config_.encoder_causal, config_.encoder_spatial_padding, stride);
}

at::Tensor VideoVaeEncoder::resnet(const at::Tensor & x, const std::string & p, int64_t channels) const {
    return video_vae_resnet(w_, x, p, channels, channels, config_.encoder_causal, config_.encoder_spatial_padding,
                            config_.resnet_norm_eps);
}

at::Tensor VideoVaeEncoder::downsampler(const at::Tensor & x, const std::string & p,
                                        const VideoVaeDownBlock & b) const {
    if (b.strided_conv) return conv(x, p + ".conv", 2);  // LTX2VideoCausalConv3d(stride 2), downsample_type "conv"
    const auto & s = b.stride;
    at::Tensor h = x;
    if (s[0] > 1) h = at::cat({x.narrow(2, 0, s[0] - 1), x}, 2);  // the first s_t - 1 frames again in front
    const int64_t group = b.in_channels * s[0] * s[1] * s[2] / b.out_channels;
    const auto residual = space_to_depth(h, s).unflatten(1, {-1, group}).mean(2);
    return space_to_depth(conv(h, p + ".conv.conv"), s) + residual;
}

at::Tensor VideoVaeEncoder::conv_out(const at::Tensor & video) const {
    const auto & c = config_;
    if (video.dim() != 5 || video.size(1) != c.in_channels)
        throw UsageError("ltx2 video VAE encode: video of shape " + model::shape_str(video.sizes()) +
                         ", expected [B, " + std::to_string(c.in_channels) + ", F, H, W] (in_channels of " +
                         c.file.string() + ")");
    const int64_t batch = video.size(0), frames = video.size(2), height = video.size(3), width = video.size(4);
    if (batch < 1 || !c.encodable_frames(frames))
        throw UsageError("ltx2 video VAE encode: " + std::to_string(frames) + " frames (batch " +
                         std::to_string(batch) + "); the encoder of " + c.file.string() + " takes 1 + " +
                         std::to_string(c.temporal_compression_ratio) + " k frames (k >= 0): use such a count");
    if (!c.encodable_pixels(height) || !c.encodable_pixels(width))
        throw UsageError("ltx2 video VAE encode: " + std::to_string(height) + "x" + std::to_string(width) +
                         " pixels; the encoder of " + c.file.string() + " takes sizes that are multiples of " +
                         std::to_string(c.spatial_downscale()) + ": resize or crop the input");

    // Patchify: reshape(B, C, F, 1, H/p, p, W/p, p).permute(0, 1, 3, 7, 5, 2, 4, 6).flatten(1, 4): the channel order
    // is (c, p_t, p_w, p_h).
    const int64_t p = c.patch_size;
    auto h = video.to(device(), dtype())
                 .reshape({batch, c.in_channels, frames, 1, height / p, p, width / p, p})
                 .permute({0, 1, 3, 7, 5, 2, 4, 6})
                 .flatten(1, 4);
    h = conv(h, "encoder.conv_in.conv");

    for (std::size_t i = 0; i < c.down_blocks.size(); ++i) {
        const auto & b = c.down_blocks[i];
        const std::string pre = "encoder.down_blocks." + std::to_string(i);
        for (int64_t j = 0; j < b.layers; ++j) h = resnet(h, pre + ".resnets." + std::to_string(j), b.in_channels);
        if (b.downsample) h = downsampler(h, pre + ".downsamplers.0", b);
        if (stage_check_) stage_check_(pre);
    }
    for (int64_t j = 0; j < c.encoder_mid_layers; ++j)
        h = resnet(h, "encoder.mid_block.resnets." + std::to_string(j), c.encoder_mid_channels);
    if (stage_check_) stage_check_("encoder.mid_block");

    return conv(at::silu(per_channel_rms_norm(h)), "encoder.conv_out.conv");
}

at::Tensor VideoVaeEncoder::encode(const at::Tensor & video) const {
    // conv_out gives latent_channels means and one log-variance channel (repeated by the reference to make the
    // moments); the mode is the means.
    return conv_out(video).narrow(1, 0, config_.latent_channels);
}

at::Tensor VideoVaeEncoder::encode_moments(const at::Tensor & video) const {
    const auto h = conv_out(video);
    const int64_t ch = config_.latent_channels;
    // LTX2VideoEncoder3d.forward: last_channel = h[:, -1:].repeat(1, h.size(1) - 2, 1, 1, 1), cat on dim 1.
    return at::cat({h.narrow(1, 0, ch), h.narrow(1, ch, 1).repeat({1, ch, 1, 1, 1})}, 1);
}

}  // namespace ddo::ltx2
