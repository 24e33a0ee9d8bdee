// The LTX-2 video VAE decoder (LTX2VideoDecoder3d as AutoencoderKLLTX2Video.decode runs it in one piece): conv_in,
// mid block, up blocks (conv_in resnet, depth-to-space upsampler with the frame drop and optional residual,
// resnets), norm_out, optional timestep conditioning, SiLU, conv_out, unpatchify; plus the pipeline's latent
// de-normalisation (LTX2Pipeline._denormalize_latents) and the leaf execution groups that leaf_offload streams.
// Every weight is read through ltx2::Weights inside a Scope of the leaf module that owns it, so the same code
// runs resident (ResidentWeights) and leaf by leaf on the engine (EngineWeights over video_vae_leaf_groups).
// diffusers models/autoencoders/autoencoder_kl_ltx2.py is the reference.
// Note [LTX2 video VAE reference quirks] in docs/architecture.md.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"
#include "video_vae_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// One group per module that holds weights directly (each nn.Conv3d, LayerNorm, Linear; a resnet for its
// scale_shift_table; "decoder" for timestep_scale_multiplier and scale_shift_table), named by the module path,
// in execution order.
std::vector<model::GroupSpec> video_vae_leaf_groups(const VideoVaeConfig & c);

// latents * std / scaling_factor + mean over the channel dim of [B, C, F, H, W] (mean / std: [C], any device and
// dtype; cast to the latents').
at::Tensor denormalize_video_latents(const at::Tensor & latents, const at::Tensor & mean, const at::Tensor & std,
                                     double scaling_factor);

class VideoVaeDecoder {
public:
    // `config` copied; `weights` borrowed (must outlive the decoder): its device and dtype are the compute device
    // and dtype. Nothing is read here: validate_video_vae_checkpoint checks the file up front.
    VideoVaeDecoder(VideoVaeConfig config, Weights & weights);

    const VideoVaeConfig & config() const { return config_; }
    at::Device device() const { return w_.device(); }
    at::ScalarType dtype() const { return w_.dtype(); }

    // z: [B, latent_channels, F', H', W'] already de-normalised (any device / dtype; moved to the compute device
    // and dtype). timestep: [B] (or one value for every sample) when the config is timestep-conditioned (the
    // pipeline's decode_timestep), undefined otherwise. Returns [B, out_channels, F, H * s, W * s] with
    // F = config().decoded_frames(F'), s = config().spatial_upscale(). UsageError for a wrong input (shape, missing
    // timestep, fewer than 2 latent pixels per side with reflect padding).
    at::Tensor decode(const at::Tensor & z, const at::Tensor & timestep = {}) const;

    // Called between the decoder's stages (after the mid block and each up block) with the stage's name; may throw
    // to stop the decode (interruption), so that a decode in one piece stops within one stage.
    void set_stage_check(std::function<void(const std::string & stage)> check) { stage_check_ = std::move(check); }

private:
    at::Tensor conv(const at::Tensor & x, const std::string & p, bool causal) const;  // LTX2VideoCausalConv3d
    at::Tensor resnet(const at::Tensor & x, const std::string & p, int64_t in, int64_t out,
                      const at::Tensor & temb) const;
    at::Tensor upsampler(const at::Tensor & x, const std::string & p, const VideoVaeUpBlock & b) const;
    at::Tensor time_embed(const std::string & p, const at::Tensor & t, int64_t batch) const;

    VideoVaeConfig config_;
    Weights & w_;
    std::function<void(const std::string &)> stage_check_;
};

}  // namespace ddo::ltx2
