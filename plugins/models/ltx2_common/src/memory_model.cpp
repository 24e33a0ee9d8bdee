#include "memory_model.hpp"

#include <algorithm>

namespace ddo::ltx2 {
namespace {

using model::MemorySide;

// The denoise phase at geometry `g`: `batch` rows in the largest pass (2: the CFG batch), `passes` predictions kept.
model::StageMemory denoise_stage(const std::string & phase, const VideoModel & m, const VideoMemoryInputs & in,
                                 const LatentGeometry & g, bool cfg, int extra_passes, std::int64_t keyframe_tokens) {
    const auto & c = m.transformer_config;
    const auto dt = in.dtype;
    const std::int64_t B = cfg ? 2 : 1, Tv = g.video_tokens() + keyframe_tokens, Ta = std::max<std::int64_t>(1, g.audio_frames);
    const std::int64_t D = c.inner_dim(), Da = c.audio_inner_dim(), L = std::max<std::int64_t>(1, in.text_tokens);
    const std::int64_t Cv = c.in_channels, Ca = c.audio_in_channels;
    const std::int64_t predictions = (cfg ? 2 : 1) + extra_passes;
    model::StageMemory s(phase);
    s.weights("transformer");
    s.tensor("latents", {1, Tv, Cv}, at::kFloat, 2, MemorySide::device, "video latents and the step's update (float32)");
    s.tensor("audio latents", {1, Ta, Ca}, at::kFloat, 2, MemorySide::device, "audio latents and the step's update");
    s.tensor("video predictions", {1, Tv, Cv}, at::kFloat, predictions, MemorySide::device, "one per pass row (float32)");
    s.tensor("audio predictions", {1, Ta, Ca}, at::kFloat, predictions, MemorySide::device, "one per pass row (float32)");
    s.tensor("prompt embeddings", {B, L, c.cross_attention_dim}, dt, 1, MemorySide::device, "the connectors' video output");
    s.tensor("audio prompt embeddings", {B, L, c.audio_cross_attention_dim}, dt, 1, MemorySide::device,
             "the connectors' audio output");
    s.tensor("RoPE tables", {B, Tv, D}, at::kFloat, 1, MemorySide::device, "video cos and sin (float32)");
    s.tensor("cross RoPE tables", {B, Tv, c.audio_cross_attention_dim}, at::kFloat, 1, MemorySide::device,
             "a2v / v2a cos and sin of the video tokens");
    s.tensor("audio RoPE tables", {B, Ta, Da + c.audio_cross_attention_dim}, at::kFloat, 1, MemorySide::device,
             "self and cross tables of the audio tokens");
    s.tensor("hidden states", {B, Tv, D}, dt, 2, MemorySide::device, "the block's input (kept in the state) and output");
    s.tensor("audio hidden states", {B, Ta, Da}, dt, 2, MemorySide::device, "the block's input and output");
    if (in.per_token_timesteps)
        s.tensor("per-token modulation", {B, Tv, D}, dt, 2 * 9 + 1, MemorySide::device,
                 "the timestep embedding per video token (9 rows) and each block's modulation parameters from it");
    // The block's working set: the video feed-forward (the normalised input, the 4 D projection and its GELU in one
    // full-expression, the output), which is larger than the attention's (q, k, v, their norms and the output) at
    // every width of the LTX-2 configurations; the audio stream's is computed after it, with the video's freed.
    s.tensor("block working set (feed-forward)", {B, Tv, D}, dt, 9, MemorySide::device,
             "normalised input, the up projection and its GELU (4 D each)");
    if (const auto * cache = in.step_cache)  // the guidance batch is one branch, each extra pass (batch 1) another
        s.bytes("step cache", cache->kept_bytes({{B, Tv, D}, {B, Ta, Da}}, dt) +
                                  std::uint64_t(extra_passes) * cache->kept_bytes({{1, Tv, D}, {1, Ta, Da}}, dt),
                MemorySide::device, "what cache." + std::string(to_string(cache->settings().kind)) +
                                        " keeps between passes (StepCache::kept_bytes)");
    return s;
}

}  // namespace

std::vector<model::StageMemory> video_stage_memory(const VideoModel & m, const VideoMemoryInputs & in,
                                                   const model::ForecastShape & shape) {
    const auto r = m.ratios();
    std::vector<model::StageMemory> out;
    const auto full = latent_geometry(r, shape.frames, shape.height, shape.width, in.fps);
    if (in.two_stage) {
        const auto half = latent_geometry(r, shape.frames, shape.height / 2, shape.width / 2, in.fps);
        out.push_back(denoise_stage("denoise", m, in, half, in.cfg, in.extra_passes, in.keyframes * half.latent_height * half.latent_width));
        out.push_back(denoise_stage("denoise_stage2", m, in, full, in.stage2_cfg, in.stage2_extra_passes, 0));
    } else {
        out.push_back(denoise_stage("denoise", m, in, full, in.cfg, in.extra_passes,
                                    in.keyframes * full.latent_height * full.latent_width));
    }
    model::StageMemory decode("decode");
    const auto & vc = m.vae_config;
    decode.weights("vae");
    decode.tensor("latents", {1, vc.latent_channels, full.latent_frames, full.latent_height, full.latent_width}, in.dtype, 2,
                  MemorySide::device, "the de-normalised latents");
    std::int64_t f = full.latent_frames, h = full.latent_height, w = full.latent_width;
    const auto & t = in.vae.tiling;
    if (in.vae.strategy == VideoVaeStrategy::temporal_stream)
        f = std::min<std::int64_t>(f, t.tile_sample_min_num_frames / r.temporal + 1);
    if (in.vae.strategy == VideoVaeStrategy::tiled || in.vae.strategy == VideoVaeStrategy::temporal_stream) {
        h = std::min<std::int64_t>(h, t.tile_sample_min_height / r.spatial);
        w = std::min<std::int64_t>(w, t.tile_sample_min_width / r.spatial);
    }
    decode.bytes("decode activations", estimate_video_decode_activation_bytes(vc, 1, f, h, w, in.dtype, !in.cuda), MemorySide::device,
                 "Note [Video VAE auto]'s estimate of the piece decoded at once (" + std::to_string(f) + " latent frames, " +
                     std::to_string(h) + "x" + std::to_string(w) + " latents)");
    decode.tensor("frames", {1, vc.out_channels, full.frames, shape.height, shape.width}, in.dtype, 1, MemorySide::device,
                  "the decoded frames");
    out.push_back(decode);
    return out;
}

}  // namespace ddo::ltx2
