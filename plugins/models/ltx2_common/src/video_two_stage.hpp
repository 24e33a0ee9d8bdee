// Stage 2 of a two-stage LTX-2 run (Note [LTX-2 two-stage runs] in docs/architecture.md), as diffusers' documented
// distilled composition computes it (docs/source/en/api/pipelines/ltx2.md): stage 1's latents through the latent
// upsampler (latent_upsampler.hpp: de-normalised, upsampled, normalised again), stage 1's audio de-normalised and
// normalised again, both noised to noise_scale (STAGE_2_DISTILLED_SIGMA_VALUES[0]) with the generator stage 1 drew
// from (LTX2Pipeline.prepare_latents / prepare_audio_latents with latents given: _create_noised_state on the packed
// tokens), or for image-to-video with latent frame 0 kept clean (LTX2ImageToVideoPipeline.prepare_latents with 5-D
// latents: the noise drawn in the 5-D shape, noise_scale * (1 - mask)).
#pragma once

#include <ATen/ATen.h>

#include "latents.hpp"
#include "video_conditions.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// upscaled: [B, C, F', H', W'] normalised (upsample_video_latents); stage1_audio: packed normalised [B, L, C*M];
// audio_vae: the audio VAE's weights (its latents_mean / latents_std). first_frame: image-to-video (the result's
// conditioning keeps latent frame 0; else no conditioning is needed and `conditioning.mask` is undefined).
ConditionedStart stage2_start(const at::Tensor & upscaled, const at::Tensor & stage1_audio, Weights & audio_vae,
                              const LatentGeometry & g, double noise_scale, bool first_frame, at::Generator & gen,
                              at::Device device);

}  // namespace ddo::ltx2
