// The LTX-2 video VAE encoder (LTX2VideoEncoder3d as AutoencoderKLLTX2Video.encode runs it in one piece): patchify
// (space-to-depth with the channel order c, p_t, p_w, p_h), conv_in, down blocks (resnets, then the space-to-depth
// downsampler with its group-mean residual, or a stride-2 conv), mid block, norm_out, SiLU, conv_out, and the latent
// distribution's mode (retrieve_latents(..., sample_mode="argmax"): the first latent_channels channels); plus the
// pipelines' latent normalisation (LTX2ImageToVideoPipeline._normalize_latents) and the leaf execution groups that
// leaf_offload streams. Every weight is read through ltx2::Weights inside a Scope of the leaf module that owns it,
// so the same code runs resident (ResidentWeights) and leaf by leaf on the engine (EngineWeights over
// video_vae_encoder_leaf_groups). diffusers models/autoencoders/autoencoder_kl_ltx2.py is the reference.
// Note [LTX2 video VAE encoder] in docs/architecture.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"
#include "video_vae_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// One group per module of the encoder that holds weights directly (each nn.Conv3d, LayerNorm), named by the module
// path, in execution order.
std::vector<model::GroupSpec> video_vae_encoder_leaf_groups(const VideoVaeConfig & c);

// (latents - mean) * scaling_factor / std over the channel dim of [B, C, F, H, W] (mean / std: [C], any device and
// dtype; cast to the latents'): the inverse of denormalize_video_latents. The image-to-video pipeline passes
// scaling_factor 1.0 for its first-frame latents (LTX2ImageToVideoPipeline.prepare_latents) and the config's for
// latents it is given; both are 1.0 in the real configs.
at::Tensor normalize_video_latents(const at::Tensor & latents, const at::Tensor & mean, const at::Tensor & std,
                                   double scaling_factor);

class VideoVaeEncoder {
public:
    // `config` copied; `weights` borrowed (must outlive the encoder): its device and dtype are the compute device
    // and dtype. Nothing is read here: validate_video_vae_encoder_checkpoint checks the file up front.
    VideoVaeEncoder(VideoVaeConfig config, Weights & weights);

    const VideoVaeConfig & config() const { return config_; }
    at::Device device() const { return w_.device(); }
    at::ScalarType dtype() const { return w_.dtype(); }

    // video: [B, in_channels, F, H, W], pixels in [-1, 1] (any device / dtype; moved to the compute device and
    // dtype); one image is F = 1. Returns the latent distribution's mode, not normalised: [B, latent_channels,
    // config().encoded_frames(F), H / s, W / s] with s = config().spatial_downscale(). UsageError for a wrong input
    // (shape, a frame count or size the encoder cannot take: config().encodable_frames / encodable_pixels).
    at::Tensor encode(const at::Tensor & video) const;
    // The latent distribution's parameters, as DiagonalGaussianDistribution reads them: [B, 2 latent_channels, ...]
    // = the means, then conv_out's one log-variance channel repeated latent_channels times (the reference's
    // moments; img2img samples them: ltx2::posterior_sample, Note [LTX-2 image img2img]). Same checks as encode.
    at::Tensor encode_moments(const at::Tensor & video) const;

    // Called between the encoder's stages (after each down block and the mid block) with the stage's name; may throw
    // to stop the encode (interruption).
    void set_stage_check(std::function<void(const std::string & stage)> check) { stage_check_ = std::move(check); }

private:
    at::Tensor conv_out(const at::Tensor & video) const;  // [B, latent_channels + 1, ...]: means, log-variance
    at::Tensor conv(const at::Tensor & x, const std::string & p, int64_t stride = 1) const;
    at::Tensor resnet(const at::Tensor & x, const std::string & p, int64_t channels) const;
    at::Tensor downsampler(const at::Tensor & x, const std::string & p, const VideoVaeDownBlock & b) const;

    VideoVaeConfig config_;
    Weights & w_;
    std::function<void(const std::string &)> stage_check_;
};

}  // namespace ddo::ltx2
