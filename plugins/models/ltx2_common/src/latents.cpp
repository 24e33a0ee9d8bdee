#include "latents.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "audio_vae_decoder.hpp"

namespace ddo::ltx2 {

LatentGeometry latent_geometry(const LatentRatios & r, int64_t frames, int64_t height, int64_t width, double fps) {
    LatentGeometry g;
    g.height = height;
    g.width = width;
    g.latent_frames = (frames - 1) / r.temporal + 1;
    g.frames = (g.latent_frames - 1) * r.temporal + 1;
    g.duration_frames = frames;
    g.latent_height = height / r.spatial;
    g.latent_width = width / r.spatial;
    // duration_s * sampling_rate / hop / temporal ratio, rounded half to even as Python's round(); duration_s is
    // num_frames / frame_rate of the frames asked for.
    const double per_second = double(r.audio_sample_rate) / double(r.hop_length) / double(r.audio_temporal);
    g.audio_frames = int64_t(std::nearbyint(double(frames) / fps * per_second));
    g.latent_mel_bins = r.mel_bins / r.mel;
    return g;
}

at::Generator noise_generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

Noise draw_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, uint64_t seed, at::Device device) {
    auto gen = noise_generator(seed);
    return draw_noise(r, g, batch, gen, device);
}

Noise draw_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, at::Generator & gen, at::Device device) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    auto video = at::randn({batch, r.video_channels, g.latent_frames, g.latent_height, g.latent_width}, gen, f32);
    auto audio = at::randn({batch, r.audio_channels, g.audio_frames, g.latent_mel_bins}, gen, f32);
    return {pack_video(video).to(device), pack_audio_latents(audio).to(device)};
}

at::Tensor draw_decode_noise(const LatentRatios & r, const LatentGeometry & g, int64_t batch, at::Generator & gen,
                             at::ScalarType dtype) {
    return at::randn({batch, r.video_channels, g.latent_frames, g.latent_height, g.latent_width}, gen,
                     at::TensorOptions().dtype(dtype));
}

at::Tensor pack_video(const at::Tensor & x) {
    // reshape(B, C, F, 1, H, 1, W, 1).permute(0, 2, 4, 6, 1, 3, 5, 7) with patch 1: [B, F, H, W, C] flattened.
    return x.permute({0, 2, 3, 4, 1}).flatten(1, 3).contiguous();
}

at::Tensor unpack_video(const at::Tensor & x, const LatentGeometry & g) {
    const int64_t B = x.size(0);
    return x.reshape({B, g.latent_frames, g.latent_height, g.latent_width, -1}).permute({0, 4, 1, 2, 3}).contiguous();
}

}  // namespace ddo::ltx2
