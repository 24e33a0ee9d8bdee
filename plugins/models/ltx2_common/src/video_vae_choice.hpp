// vae.strategy for the LTX-2 video VAE, with `auto` decided as seed 003's VAE decode table says (Note [Video VAE
// auto]): resident when the decoder weights + the estimated one-piece decode activations of the whole clip fit the
// device's available memory; on CUDA leaf_offload when the activations fit but the weights do not and host RAM
// holds them; otherwise the bounded choices: temporal_stream (latent windows, each spatially tiled when larger than
// a tile) for a clip longer than one window, tiled for a shorter one — also when the available memory is unknown.
// The report records the estimates, the budget, its source and the reason, like the Qwen-Image VaeChoice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_plan.hpp"
#include "ddo/model/tensor_file.hpp"
#include "video_vae_config.hpp"
#include "video_vae_tiling.hpp"

namespace ddo::ltx2 {

struct VideoVaeChoice {
    VideoVaeStrategy strategy = VideoVaeStrategy::resident;
    VideoVaeTiling tiling;   // used by tiled and temporal_stream
    std::string requested;   // the setting: auto | resident | leaf_offload | tiled | temporal_stream
    std::string reason;      // why this strategy
    nlohmann::json facts;    // auto: {"estimate_activation_bytes", "estimate_window_activation_bytes",
                             //        "weight_bytes", "budget": {...}, "host_budget", "estimate"}
};

// Peak bytes of the activations of decoding latents [batch, C, latent_frames, latent_h, latent_w] in one piece (an
// estimate: 4x the largest tensor of any stage: its input, output and the conv / norm temporaries; on the CPU (`cpu`)
// at least, at each resnet's resolution, three such tensors plus the column buffer of a convolution that takes an
// im2col path: ddo::torch::conv3d_column_bytes, Note [Memory forecast]).
std::uint64_t estimate_video_decode_activation_bytes(const VideoVaeConfig & c, std::int64_t batch,
                                                     std::int64_t latent_frames, std::int64_t latent_h,
                                                     std::int64_t latent_w, at::ScalarType dtype, bool cpu = false);

// The pure decision of `auto` from the numbers (choose_video_vae_strategy gathers them): `clip_activations` of the
// whole clip in one piece, `window_activations` of one temporal window (tiled spatially when larger than a tile),
// `temporal` whether the clip is longer than one window; budgets nullopt = unknown. Returns strategy + reason.
struct VideoVaeDecision {
    VideoVaeStrategy strategy;
    std::string reason;
};
VideoVaeDecision decide_video_vae_strategy(std::uint64_t weight_bytes, std::uint64_t clip_activations,
                                           std::uint64_t window_activations, bool temporal, bool cuda,
                                           std::optional<std::uint64_t> device_budget,
                                           const std::string & device_budget_source,
                                           std::optional<std::uint64_t> host_budget, const VideoVaeTiling & tiling);

// frames / width / height: the output video's (pixel) size; `vae` the VAE component (its header gives the weight
// bytes); temporal_frames: vae.temporal_frames. UsageError for tile settings the VAE cannot use (from_plan).
// The plan the VAE's leaf groups (decoder or encoder) run on: `vae`'s, on the dynamic route under leaf_offload (its
// leaves streamed one at a time).
model::ComponentPlan video_vae_plan(const model::ComponentPlan & vae, const VideoVaeChoice & choice);

VideoVaeChoice choose_video_vae_strategy(const model::ComponentPlan & plan, const model::TensorFile & vae,
                                         const VideoVaeConfig & c, std::int64_t batch, std::int64_t frames,
                                         std::int64_t width, std::int64_t height, at::ScalarType dtype,
                                         int temporal_frames = 16);

}  // namespace ddo::ltx2
