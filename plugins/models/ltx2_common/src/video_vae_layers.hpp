// Layers shared by the LTX-2 video VAE encoder and decoder: PerChannelRMSNorm, LTX2VideoCausalConv3d (causal or
// symmetric replicate padding in time, the configured padding mode in space, optional stride),
// LTX2VideoResnetBlock3d (with the optional timestep modulation), and the leaf execution groups of a state-dict
// spec (one group per module that holds tensors directly). Every weight is read through ltx2::Weights inside the
// Scope of the module that owns it. diffusers models/autoencoders/autoencoder_kl_ltx2.py is the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"
#include "video_vae_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// x / sqrt(mean_c(x^2) + 1e-8) over dim 1 (no parameters).
at::Tensor per_channel_rms_norm(const at::Tensor & x);

// LTX2VideoCausalConv3d at module path `p` (tensors p.weight, p.bias, read in Scope p): k_t - 1 copies of the first
// frame in front (causal) or (k_t - 1) / 2 copies of the first and last frames (not causal), spatial padding k / 2
// in `padding` mode, then the convolution with `stride` in every dimension.
at::Tensor video_vae_causal_conv(Weights & w, const at::Tensor & x, const std::string & p, bool causal,
                                 SpatialPadding padding, int64_t stride = 1);

// LTX2VideoResnetBlock3d at `p` (in -> out channels; norm3 + conv_shortcut when they differ). `temb` ([B, 4 * in, 1,
// 1, 1], the time embedding) when timestep-conditioned (p.scale_shift_table), undefined otherwise.
at::Tensor video_vae_resnet(Weights & w, const at::Tensor & x, const std::string & p, int64_t in, int64_t out,
                            bool causal, SpatialPadding padding, double eps, const at::Tensor & temb = {});

// One group per module that holds tensors directly, named by the module path, in the spec's order.
std::vector<model::GroupSpec> video_vae_groups_of(const VideoVaeWeightSpec & spec);

}  // namespace ddo::ltx2
