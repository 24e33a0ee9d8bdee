#include "video_two_stage.hpp"

#include "audio_vae_decoder.hpp"
#include "ddo/error.hpp"

namespace ddo::ltx2 {

ConditionedStart stage2_start(const at::Tensor & upscaled, const at::Tensor & stage1_audio, Weights & audio_vae,
                              const LatentGeometry & g, double noise_scale, bool first_frame, at::Generator & gen,
                              at::Device device) {
    if (upscaled.dim() != 5 || upscaled.size(2) != g.latent_frames || upscaled.size(3) != g.latent_height ||
        upscaled.size(4) != g.latent_width)
        throw RuntimeError("ltx2: the upscaled latents have shape " + c10::str(upscaled.sizes()) + ", stage 2 needs [B, C, " +
                           std::to_string(g.latent_frames) + ", " + std::to_string(g.latent_height) + ", " +
                           std::to_string(g.latent_width) + "] (the latent upsampler's scale does not give the stage-2 "
                           "size: use an x2 spatial upsampler)");
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto latents = upscaled.to(at::kCPU, at::kFloat);
    ConditionedStart s;
    if (first_frame) {
        const auto mask = first_frame_mask(latents.size(0), g, f32);
        const auto scale = noise_scale * (1 - mask);
        const auto noise = at::randn(latents.sizes(), gen, f32);
        s.video = pack_video(scale * noise + (1 - scale) * latents).to(device);
        s.conditioning = first_frame_conditioning(mask.to(device), g);
    } else {
        const auto packed = pack_video(latents);
        const auto noise = at::randn(packed.sizes(), gen, f32);
        s.video = (noise_scale * noise + (1 - noise_scale) * packed).to(device);
    }
    // The stage-1 audio as output_type="latent" hands it over (de-normalised) and stage 2 normalises it again.
    const auto audio = normalize_audio_latents(audio_vae, denormalize_audio_latents(audio_vae, stage1_audio.to(at::kFloat)))
                           .to(at::kCPU);
    const auto noise = at::randn(audio.sizes(), gen, f32);
    s.audio = (noise_scale * noise + (1 - noise_scale) * audio).to(device);
    return s;
}

}  // namespace ddo::ltx2
