#include "video_conditions.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "ddo/error.hpp"

namespace ddo::ltx2 {

at::Tensor first_frame_mask(int64_t batch, const LatentGeometry & g, const at::TensorOptions & options) {
    auto mask = at::zeros({batch, 1, g.latent_frames, g.latent_height, g.latent_width}, options.dtype(at::kFloat));
    mask.select(2, 0).fill_(1.0);
    return mask;
}

VideoConditioning first_frame_conditioning(const at::Tensor & mask, const LatentGeometry & g) {
    VideoConditioning c;
    c.mode = ConditioningMode::first_frame;
    c.mask = pack_video(mask).squeeze(-1);
    c.grid_tokens = g.video_tokens();
    c.frame_tokens = g.latent_height * g.latent_width;
    return c;
}

ConditionedStart first_frame_start(const at::Tensor & image_latents, const LatentRatios & r, const LatentGeometry & g,
                                   int64_t batch, at::Generator & gen, at::Device device) {
    if (image_latents.dim() != 5 || image_latents.size(1) != r.video_channels || image_latents.size(2) != 1 ||
        image_latents.size(3) != g.latent_height || image_latents.size(4) != g.latent_width)
        throw RuntimeError("ltx2: the condition image's latents have shape " + c10::str(image_latents.sizes()) +
                           ", expected [1, " + std::to_string(r.video_channels) + ", 1, " +
                           std::to_string(g.latent_height) + ", " + std::to_string(g.latent_width) + "]");
    // The encode draws nothing (argmax), so the noise is LTX2Pipeline's draw: video [B, C, F, H, W], then audio.
    auto noise = draw_noise(r, g, batch, gen, device);
    const auto mask5 = first_frame_mask(batch, g, noise.video.options());
    const auto init = pack_video(image_latents.to(device, at::kFloat).expand({batch, -1, -1, -1, -1})
                                     .repeat({1, 1, g.latent_frames, 1, 1}));
    const auto mask = pack_video(mask5);  // [B, N, 1]
    ConditionedStart s;
    s.video = init * mask + noise.video * (1 - mask);
    s.audio = noise.audio;
    s.conditioning = first_frame_conditioning(mask5, g);
    return s;
}

int64_t pixel_frame_of(const LatentRatios & r, int64_t latent_index) {
    return latent_index == 0 ? 0 : (latent_index - 1) * r.temporal + 1;
}

std::optional<int64_t> latent_index_of(const LatentRatios & r, int64_t pixel_frame) {
    if (pixel_frame == 0) return 0;
    if (pixel_frame < 0 || (pixel_frame - 1) % r.temporal != 0) return std::nullopt;
    return (pixel_frame - 1) / r.temporal + 1;
}

at::Tensor keyframe_coords(const LatentRatios & r, int64_t frames, int64_t height, int64_t width, int64_t pixel_frame,
                           int64_t pixel_frames, double fps) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto grid = at::stack(at::meshgrid({at::arange(0, frames, 1, f32), at::arange(0, height, 1, f32),
                                              at::arange(0, width, 1, f32)},
                                             "ij"),
                                0);  // [3, F, H, W]
    const auto ends = grid + at::ones({3, 1, 1, 1}, f32);
    auto coords = at::stack({grid, ends}, -1).flatten(1, 3).unsqueeze(0);  // [1, 3, n, 2]
    const auto scale = at::tensor({float(r.temporal), float(r.spatial), float(r.spatial)}, f32).view({1, -1, 1, 1});
    coords = coords * scale;
    auto t = coords.select(1, 0);  // a view: the writes below land in coords
    t.add_(double(pixel_frame));
    if (pixel_frames == 1) t.narrow(-1, 1, 1).copy_(t.narrow(-1, 0, 1) + 1);
    t.div_(fps);
    return coords;
}

ConditionedStart blend_start(const std::vector<LatentCondition> & conditions, const LatentRatios & r,
                             const LatentGeometry & g, double noise_scale, double fps, int64_t batch, uint64_t seed,
                             at::Device device) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const int64_t C = r.video_channels, grid = g.video_tokens();
    auto latents = at::zeros({batch, grid, C}, f32);
    auto mask = at::zeros({batch, grid, 1}, f32);
    auto clean = at::zeros_like(latents);
    // apply_first_frame_conditioning: conditions at latent 0 overwrite the first tokens.
    for (const auto & c : conditions) {
        if (c.latent_index != 0) continue;
        const auto packed = pack_video(c.latents.to(at::kCPU, at::kFloat));
        const int64_t n = packed.size(1);
        if (n > grid)
            throw RuntimeError("ltx2: a frame-0 condition of " + std::to_string(n) + " tokens is longer than the clip's " +
                               std::to_string(grid));
        latents.narrow(1, 0, n).copy_(packed.expand({batch, -1, -1}));
        mask.narrow(1, 0, n).fill_(c.strength);
        clean.narrow(1, 0, n).copy_(packed.expand({batch, -1, -1}));
    }
    // Keyframes: appended tokens with their own coordinates, mask = strength.
    std::vector<at::Tensor> kf_tokens, kf_masks, kf_coords;
    for (const auto & c : conditions) {
        if (c.latent_index == 0) continue;
        const auto packed = pack_video(c.latents.to(at::kCPU, at::kFloat)).expand({batch, -1, -1});
        kf_tokens.push_back(packed);
        kf_masks.push_back(at::full({batch, packed.size(1), 1}, c.strength, f32));
        kf_coords.push_back(keyframe_coords(r, c.latents.size(2), c.latents.size(3), c.latents.size(4),
                                            pixel_frame_of(r, c.latent_index), c.pixel_frames, fps)
                                .expand({batch, -1, -1, -1}));
    }
    ConditionedStart s;
    if (!kf_tokens.empty()) {
        const auto tokens = at::cat(kf_tokens, 1);
        latents = at::cat({latents, tokens}, 1);
        mask = at::cat({mask, at::cat(kf_masks, 1)}, 1);
        clean = at::cat({clean, tokens}, 1);
        s.conditioning.keyframe_coords = at::cat(kf_coords, 2).contiguous().to(device);
    }
    // The noise over every token, then the audio noise in packed shape (LTX2ConditionPipeline draws both packed).
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto noise = at::randn(latents.sizes(), gen, f32);
    const auto audio = at::randn({batch, g.audio_frames, r.audio_channels * g.latent_mel_bins}, gen, f32);
    const auto scaled = (1.0 - mask) * noise_scale;
    s.video = (noise * scaled + latents * (1 - scaled)).to(device);
    s.audio = audio.to(device);
    s.conditioning.mode = ConditioningMode::blend;
    s.conditioning.mask = mask.squeeze(-1).to(device);
    s.conditioning.clean = clean.to(device);
    s.conditioning.grid_tokens = grid;
    return s;
}

}  // namespace ddo::ltx2
