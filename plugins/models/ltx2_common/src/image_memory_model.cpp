#include "image_memory_model.hpp"

#include "memory_model.hpp"

#include <algorithm>

namespace ddo::ltx2 {

std::vector<model::StageMemory> image_stage_memory(const ImageModel & m, const ImageMemoryInputs & in,
                                                   const model::ForecastShape & s) {
    using model::MemorySide;
    const auto & c = m.transformer_config;
    const auto & vc = m.vae_config;
    const auto g = image_geometry(vc, s.height, s.width);
    const auto dt = in.dtype;
    const std::int64_t B = in.batch, T = std::max<std::int64_t>(1, g.tokens()), D = c.inner_dim(), C = c.in_channels;
    std::vector<model::StageMemory> out;
    if (in.embeds_given) {  // image_text_batch: the guidance batch concatenated, whatever its rows
        ConnectorEncode e;
        e.batch = in.batch;
        e.tokens = in.text_tokens;
        e.prompts = in.prompts;
        e.batch_copy = true;
        e.embeds_dtype = in.embeds_dtype;
        e.dtype = dt;
        e.audio = false;
        connector_encode_stages(out, m.connectors_config, e);
    }
    model::StageMemory denoise("denoise");
    denoise.weights("transformer");
    denoise.tensor("latents", {1, T, C}, at::kFloat, 2, MemorySide::device, "the latents and the step's update (float32)");
    denoise.tensor("predictions", {B, T, C}, at::kFloat, 1, MemorySide::device, "the guidance batch's (float32)");
    denoise.tensor("prompt embeddings", {B, std::max<std::int64_t>(1, in.text_tokens), c.cross_attention_dim}, dt, 1,
                   MemorySide::device, "the connectors' output for the guidance batch");
    denoise.tensor("RoPE tables", {B, T, D}, at::kFloat, 1, MemorySide::device, "cos and sin (float32)");
    denoise.tensor("hidden states", {B, T, D}, dt, 2, MemorySide::device, "the block's input (kept in the state) and output");
    // As the video DiT's (memory_model.cpp): the feed-forward's normalised input, 4 D projection and its GELU.
    denoise.tensor("block working set (feed-forward)", {B, T, D}, dt, 9, MemorySide::device,
                   "normalised input, the up projection and its GELU (4 D each)");
    if (const auto * cache = in.step_cache)  // the guidance batch's one pass per step: one branch
        denoise.bytes("step cache", cache->kept_bytes({{B, T, D}}, dt), MemorySide::device,
                      "what cache." + std::string(to_string(cache->settings().kind)) +
                          " keeps between passes (StepCache::kept_bytes)");
    model::StageMemory decode("decode");
    decode.weights("vae");
    decode.tensor("latents", {1, vc.latent_channels, 1, g.latent_height, g.latent_width}, dt, 2, MemorySide::device,
                  "the de-normalised latents");
    std::int64_t h = g.latent_height, w = g.latent_width;
    if (in.vae.strategy == VideoVaeStrategy::tiled || in.vae.strategy == VideoVaeStrategy::temporal_stream) {
        const auto spatial = std::max<std::int64_t>(1, s.width / std::max<std::int64_t>(1, g.latent_width));
        h = std::min<std::int64_t>(h, in.vae.tiling.tile_sample_min_height / spatial);
        w = std::min<std::int64_t>(w, in.vae.tiling.tile_sample_min_width / spatial);
    }
    decode.bytes("decode activations", estimate_video_decode_activation_bytes(vc, 1, 1, h, w, dt, !in.cuda),
                 MemorySide::device, "Note [Video VAE auto]'s estimate of one frame (" + std::to_string(h) + "x" +
                                         std::to_string(w) + " latents at once)");
    decode.tensor("image", {1, vc.out_channels, s.height, s.width}, dt, 2, MemorySide::device, "the decoded frame and its copy");
    out.push_back(denoise);
    out.push_back(decode);
    return out;
}

}  // namespace ddo::ltx2
