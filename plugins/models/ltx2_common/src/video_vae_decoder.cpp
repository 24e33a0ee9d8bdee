// VideoVaeDecoder: LTX2VideoDecoder3d.forward and its own layers (LTX2VideoUpsampler3d,
// PixArtAlphaCombinedTimestepSizeEmbeddings; the convolution, norm and resnet are video_vae_layers') in ATen, reading
// every weight inside the Scope of its leaf module. Reference: diffusers autoencoder_kl_ltx2.py, embeddings.py.
#include "video_vae_decoder.hpp"

#include <cmath>

#include "ddo/error.hpp"
#include "video_vae_layers.hpp"

namespace ddo::ltx2 {
namespace {

// reshape(B, -1, st, sh, sw, F, H, W).permute(0, 1, 5, 2, 6, 3, 7, 4) and the flattens: depth-to-space with the
// channel order (c, s_t, s_h, s_w).
at::Tensor depth_to_space(const at::Tensor & x, const std::array<int64_t, 3> & s) {
    const auto b = x.size(0), f = x.size(2), h = x.size(3), w = x.size(4);
    return x.reshape({b, -1, s[0], s[1], s[2], f, h, w})
        .permute({0, 1, 5, 2, 6, 3, 7, 4})
        .flatten(6, 7)
        .flatten(4, 5)
        .flatten(2, 3);
}

}  // namespace

std::vector<model::GroupSpec> video_vae_leaf_groups(const VideoVaeConfig & c) {
    return video_vae_groups_of(video_vae_decoder_specs(c));
}

at::Tensor denormalize_video_latents(const at::Tensor & latents, const at::Tensor & mean, const at::Tensor & std,
                                     double scaling_factor) {
    const auto opts = latents.options();
    const auto m = mean.to(opts).view({1, -1, 1, 1, 1});
    const auto s = std.to(opts).view({1, -1, 1, 1, 1});
    return latents * s / scaling_factor + m;
}

VideoVaeDecoder::VideoVaeDecoder(VideoVaeConfig config, Weights & weights) : config_(std::move(config)), w_(weights) {}

at::Tensor VideoVaeDecoder::conv(const at::Tensor & x, const std::string & p, bool causal) const {
    return video_vae_causal_conv(w_, x, p, causal, config_.decoder_spatial_padding);
}

at::Tensor VideoVaeDecoder::time_embed(const std::string & p, const at::Tensor & t, int64_t batch) const {
    // Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0) in fp32, then TimestepEmbedding in the compute
    // dtype: linear_1 -> SiLU -> linear_2.
    constexpr int64_t half = 128;
    auto exponent = at::arange(0, half, t.options().dtype(at::kFloat)) * -std::log(10000.0);
    exponent = exponent / double(half);
    const auto freqs = t.to(at::kFloat).unsqueeze(1) * at::exp(exponent).unsqueeze(0);
    auto emb = at::cat({at::cos(freqs), at::sin(freqs)}, -1).to(dtype());
    const std::string l1 = p + ".timestep_embedder.linear_1", l2 = p + ".timestep_embedder.linear_2";
    {
        Weights::Scope s(w_, l1);
        emb = at::silu(at::linear(emb, w_.get(l1 + ".weight"), w_.get(l1 + ".bias")));
    }
    Weights::Scope s(w_, l2);
    emb = at::linear(emb, w_.get(l2 + ".weight"), w_.get(l2 + ".bias"));
    return emb.view({batch, -1, 1, 1, 1});
}

at::Tensor VideoVaeDecoder::resnet(const at::Tensor & x, const std::string & p, int64_t in, int64_t out,
                                   const at::Tensor & temb) const {
    return video_vae_resnet(w_, x, p, in, out, config_.decoder_causal, config_.decoder_spatial_padding,
                            config_.resnet_norm_eps, temb);
}

at::Tensor VideoVaeDecoder::upsampler(const at::Tensor & x, const std::string & p, const VideoVaeUpBlock & b) const {
    const auto & s = b.stride;
    at::Tensor residual;
    if (b.residual) {
        const int64_t repeats = s[0] * s[1] * s[2] / b.upscale_factor;
        residual = depth_to_space(x, s).repeat({1, repeats, 1, 1, 1}).narrow(2, s[0] - 1, x.size(2) * s[0] - (s[0] - 1));
    }
    auto h = depth_to_space(conv(x, p + ".conv.conv", config_.decoder_causal), s);
    h = h.narrow(2, s[0] - 1, h.size(2) - (s[0] - 1));  // the first s_t - 1 frames are dropped
    return b.residual ? h + residual : h;
}

at::Tensor VideoVaeDecoder::decode(const at::Tensor & z, const at::Tensor & timestep) const {
    const auto & c = config_;
    if (z.dim() != 5 || z.size(1) != c.latent_channels || z.size(2) < 1 || z.size(3) < 1 || z.size(4) < 1)
        throw UsageError("ltx2 video VAE decode: latents of shape " + model::shape_str(z.sizes()) + ", expected [B, " +
                         std::to_string(c.latent_channels) + ", F', H', W'] (latent_channels of " + c.file.string() +
                         ")");
    if (c.decoder_spatial_padding == SpatialPadding::reflect && (z.size(3) < 2 || z.size(4) < 2))
        throw UsageError("ltx2 video VAE decode: latents of " + std::to_string(z.size(3)) + "x" +
                         std::to_string(z.size(4)) + " latent pixels; decoder_spatial_padding_mode 'reflect' of " +
                         c.file.string() + " needs at least 2 per side (the reference fails too): use a larger "
                         "size, or vae.tile_size / vae.tile_overlap that leave no 1-pixel edge tile");
    const int64_t batch = z.size(0);
    const bool causal = c.decoder_causal;
    at::Tensor temb;  // timestep * timestep_scale_multiplier, [B]
    if (c.timestep_conditioning) {
        if (!timestep.defined() || (timestep.numel() != 1 && timestep.numel() != batch))
            throw UsageError("ltx2 video VAE decode: " + c.file.string() +
                             " is timestep-conditioned (timestep_conditioning true): pass the decode timestep, one "
                             "value or one per sample (" + std::to_string(batch) + ")");
        Weights::Scope s(w_, "decoder");
        temb = timestep.to(device(), dtype()).reshape({-1}).expand({batch}) *
               w_.get("decoder.timestep_scale_multiplier");
    }
    auto h = conv(z.to(device(), dtype()), "decoder.conv_in.conv", causal);

    at::Tensor emb;
    if (temb.defined()) emb = time_embed("decoder.mid_block.time_embedder", temb, batch);
    for (int64_t j = 0; j < c.mid_layers; ++j)
        h = resnet(h, "decoder.mid_block.resnets." + std::to_string(j), c.mid_channels, c.mid_channels, emb);
    if (stage_check_) stage_check_("decoder.mid_block");

    for (std::size_t i = 0; i < c.up_blocks.size(); ++i) {
        const auto & b = c.up_blocks[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        // from_json refuses conv_in with timestep conditioning (the reference would pass it the raw timestep).
        if (b.conv_in) h = resnet(h, p + ".conv_in", b.input_width, b.out_channels, {});
        if (temb.defined()) emb = time_embed(p + ".time_embedder", temb, batch);
        if (b.upsample) h = upsampler(h, p + ".upsamplers.0", b);
        for (int64_t j = 0; j < b.layers; ++j)
            h = resnet(h, p + ".resnets." + std::to_string(j), b.out_channels, b.out_channels, emb);
        if (stage_check_) stage_check_(p);
    }

    h = per_channel_rms_norm(h);
    if (temb.defined()) {
        const auto e = time_embed("decoder.time_embedder", temb, batch).unflatten(1, {2, -1});
        Weights::Scope s(w_, "decoder");
        const auto mod = (e + w_.get("decoder.scale_shift_table").view({1, 2, c.final_channels, 1, 1, 1})).unbind(1);
        h = h * (mod[1] + 1) + mod[0];
    }
    h = conv(at::silu(h), "decoder.conv_out.conv", causal);

    // Unpatchify: reshape(B, -1, p_t, p, p, F, H, W).permute(0, 1, 5, 2, 6, 4, 7, 3): the channel order is
    // (c, p_t, p_w, p_h).
    const int64_t p = c.patch_size, f = h.size(2), hh = h.size(3), ww = h.size(4);
    return h.reshape({batch, -1, 1, p, p, f, hh, ww})
        .permute({0, 1, 5, 2, 6, 4, 7, 3})
        .flatten(6, 7)
        .flatten(4, 5)
        .flatten(2, 3);
}

}  // namespace ddo::ltx2
