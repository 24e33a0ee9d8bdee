// Image conditioning of the LTX-2 video tokens (Note [LTX-2 image conditioning] in docs/architecture.md), in the two
// forms diffusers 0.42.1 has:
//   first_frame  LTX2ImageToVideoPipeline (pipeline_ltx2_image2video.py prepare_latents, __call__): the still's
//                latents replace latent frame 0 (mask 1), the seeded noise fills the rest (drawn as LTX2Pipeline
//                draws it); every step the video timestep is t * (1 - mask) per token and frame 0 stays out of the
//                Euler update.
//   blend        LTX2ConditionPipeline (pipeline_ltx2_condition.py prepare_latents, _prepare_keyframe_coords,
//                __call__): a condition at latent frame 0 replaces its tokens with mask = strength; a condition at a
//                later latent frame is appended as keyframe tokens with their own RoPE coordinates (mask =
//                strength); the noise is drawn for every token after the conditions and mixed in by
//                (1 - mask) * noise_scale; every step blends the guided x0 with the clean latents by the mask, and
//                the appended tokens are dropped after the last step.
// The condition latents are the VAE encoder's mode, normalised as the pipelines normalise them (scaling factor 1).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "latents.hpp"
#include "transformer_config.hpp"

namespace ddo::ltx2 {

enum class ConditioningMode { first_frame, blend };

// What the denoising loop needs to honour the conditions. Tensors float32 on the latents' device, batch B (the
// loop repeats them for the CFG batch).
struct VideoConditioning {
    ConditioningMode mode = ConditioningMode::first_frame;
    at::Tensor mask;                            // [B, N] per token: 0 = generated, 1 = kept clean, else strength
    at::Tensor clean;                           // blend: [B, N, C] the clean condition latents (0 elsewhere)
    std::optional<at::Tensor> keyframe_coords;  // blend with keyframes: [B, 3, K, 2] appended to the grid's
    int64_t grid_tokens = 0;                    // F'H'W'; N - grid_tokens keyframe tokens follow
    int64_t frame_tokens = 0;                   // first_frame: H'W', the tokens of latent frame 0
};

// One encoded condition and where it goes (LTX2VideoCondition after preprocess_conditions).
struct LatentCondition {
    at::Tensor latents;        // [1, C, F_c, h, w] normalised
    int64_t latent_index = 0;  // >= 0 (a negative index already taken modulo the latent frames)
    int64_t pixel_frames = 1;  // pixel frames of the condition (1: a still)
    double strength = 1.0;
};

// The start of a conditioned run: packed video latents [B, N, C], packed audio noise, the conditioning.
struct ConditionedStart {
    at::Tensor video, audio;
    VideoConditioning conditioning;
};

// LTX2ImageToVideoPipeline's conditioning mask [batch, 1, F', H', W'] (1 on latent frame 0), float32 with `options`,
// and the first_frame conditioning it gives (packed mask, frame 0's tokens).
at::Tensor first_frame_mask(int64_t batch, const LatentGeometry & g, const at::TensorOptions & options);
VideoConditioning first_frame_conditioning(const at::Tensor & mask, const LatentGeometry & g);

// LTX2ImageToVideoPipeline.prepare_latents: image_latents [B or 1, C, 1, h, w] (normalised) on frame 0, the rest the
// seeded noise (draw_noise's video then audio, the reference's order).
ConditionedStart first_frame_start(const at::Tensor & image_latents, const LatentRatios & r, const LatentGeometry & g,
                                   int64_t batch, at::Generator & gen, at::Device device);
inline ConditionedStart first_frame_start(const at::Tensor & image_latents, const LatentRatios & r,
                                          const LatentGeometry & g, int64_t batch, uint64_t seed, at::Device device) {
    auto gen = noise_generator(seed);
    return first_frame_start(image_latents, r, g, batch, gen, device);
}

// LTX2ConditionPipeline.prepare_latents + prepare_audio_latents: conditions at latent 0 written into the grid,
// later ones appended, then randn over every token [B, N, C] and the audio noise from the same generator.
ConditionedStart blend_start(const std::vector<LatentCondition> & conditions, const LatentRatios & r,
                             const LatentGeometry & g, double noise_scale, double fps, int64_t batch, uint64_t seed,
                             at::Device device);

// _prepare_keyframe_coords: [1, 3, F_c h w, 2] bounds of a keyframe placed at pixel frame `pixel_frame` (no causal
// fix; a one-frame keyframe spans [idx, idx + 1)), time in seconds. Patch size 1.
at::Tensor keyframe_coords(const LatentRatios & r, int64_t frames, int64_t height, int64_t width, int64_t pixel_frame,
                           int64_t pixel_frames, double fps);

// The first pixel frame of latent frame `latent_index` ((i - 1) * temporal + 1, 0 for i = 0), and the inverse for a
// pixel frame on the latent grid (nullopt otherwise).
int64_t pixel_frame_of(const LatentRatios & r, int64_t latent_index);
std::optional<int64_t> latent_index_of(const LatentRatios & r, int64_t pixel_frame);

}  // namespace ddo::ltx2
