// The LTX2Pipeline's latent bookkeeping (models.md §5.12 steps 3, 7; diffusers pipeline_ltx2.py): the latent
// geometry of a request, the seeded noise in the reference's draw order (one CPU generator: video first, then
// audio), and packing the video latents [B, C, F', H', W'] into tokens [B, F'H'W', C] (patch 1) and back. The
// audio packing and both de-normalisations belong to their VAEs (audio_vae_decoder.hpp, video_vae_decoder.hpp).
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace ddo::ltx2 {

// What the checkpoint's VAEs say about compression (vae/config.json, audio_vae/config.json).
struct LatentRatios {
    int64_t spatial = 32, temporal = 8;        // video VAE
    int64_t audio_temporal = 4, mel = 4;       // audio VAE
    int64_t audio_sample_rate = 16000, hop_length = 160, mel_bins = 64;
    int64_t video_channels = 128, audio_channels = 8;
};

struct LatentGeometry {
    int64_t frames = 0, height = 0, width = 0;       // pixels: the clip's frames, on the latent grid (1 + temporal k)
    int64_t duration_frames = 0;                     // the frames asked for: the audio lasts duration_frames / fps
    int64_t latent_frames = 0, latent_height = 0, latent_width = 0;
    int64_t audio_frames = 0;                        // latent audio frames: round(frames / fps * sr / hop / 4)
    int64_t latent_mel_bins = 0;
    int64_t video_tokens() const { return latent_frames * latent_height * latent_width; }
};

// prepare_latents / prepare_audio_latents sizes for `frames` asked for: F' = (frames - 1) / temporal + 1 (the clip
// then has (F' - 1) * temporal + 1 frames: the grid floors an off-grid count), H' = H / spatial, ..., and the audio of
// frames / fps seconds: LTX2Pipeline takes the audio's duration from num_frames, not from the floored grid.
LatentGeometry latent_geometry(const LatentRatios & r, int64_t frames, int64_t height, int64_t width, double fps);

struct Noise {
    at::Tensor video;  // packed [B, F'H'W', C], float32
    at::Tensor audio;  // packed [B, L, C*M], float32
};
// randn([B, C, F', H', W']) then randn([B, Ca, L, M']) from torch.Generator().manual_seed(seed) on the CPU (the
// reference's generator), packed; moved to `device` afterwards.
Noise draw_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, uint64_t seed, at::Device device);
// The same from `gen` (noise_generator(seed)), which a two-stage run carries into stage 2 as the reference's single
// torch.Generator.
at::Generator noise_generator(uint64_t seed);
Noise draw_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, at::Generator & gen, at::Device device);

// LTX2Pipeline's decode noise (a timestep-conditioned VAE): randn(latents.shape, generator, dtype=latents.dtype)
// drawn after denoising from the generator the noise came from: [B, video_channels, F', H', W'] on the CPU in
// `dtype` (the unpacked latents' shape and compute dtype).
at::Tensor draw_decode_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, at::Generator & gen,
                             at::ScalarType dtype);

at::Tensor pack_video(const at::Tensor & x);                                   // [B,C,F,H,W] -> [B,FHW,C]
at::Tensor unpack_video(const at::Tensor & x, const LatentGeometry & g);       // [B,FHW,C] -> [B,C,F,H,W]

}  // namespace ddo::ltx2
