#include "memory_model.hpp"

#include <algorithm>

#include "transformer.hpp"
#include "vae_blocks.hpp"

namespace ddo::qwen_image_21 {
namespace {

using model::MemorySide;

std::uint64_t numel(const std::vector<std::int64_t> & shape) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= std::uint64_t(d);
    return n;
}

template <class Specs> std::uint64_t spec_bytes(const Specs & specs, at::ScalarType dtype) {
    std::uint64_t b = 0;
    for (const auto & [name, shape] : specs) b += numel(shape) * c10::elementSize(dtype);
    return b;
}

}  // namespace

std::vector<model::StageMemory> stage_memory(const ModelFiles & m, const MemoryInputs & in, const model::ForecastShape & s) {
    const auto & tc = m.transformer_config;
    const auto dt = in.dtype;
    const std::int64_t width = std::max<std::int64_t>(32, s.width / 32 * 32), height = std::max<std::int64_t>(32, s.height / 32 * 32);
    const std::int64_t B = in.batch, T = (height / 16) * (width / 16), C = tc.in_channels, D = tc.inner_dim();
    const std::int64_t hidden = D * tc.mlp_ratio;
    // The joint sequence: the prompt's tokens with each reference image slot widened to its 2x2 latent tokens, then
    // the target's latent tokens (Transformer::prepare).
    const std::int64_t L = std::max<std::int64_t>(1, in.prompt_tokens);
    const std::int64_t prefix = std::max<std::int64_t>(1, L - in.reference_tokens / 4 + in.reference_tokens);
    const std::int64_t S = prefix + T;
    const std::int64_t passes = in.guide ? 2 : 1;

    std::vector<model::StageMemory> out;
    if (in.text_tower) {
        // The prompts one after another through the tower (batch 1 each); the first one's embeddings kept meanwhile.
        model::StageMemory encode("encode");
        encode.weights("text_encoder");
        text::qwen3_tower_memory(encode, *in.text_tower, 1, in.tower_tokens, dt);
        if (in.prompts > 1)
            encode.tensor("prompt embeddings", {1, L, in.text_tower->hidden_size}, dt, in.prompts - 1, MemorySide::device,
                          "the prompt's, kept while the negative prompt is encoded");
        out.push_back(encode);
    }
    model::StageMemory denoise("denoise");
    denoise.weights("transformer");
    denoise.bytes("transformer globals", spec_bytes(global_tensor_specs(tc), dt), MemorySide::device,
                  "img_in, txt_in, time embedding, modulation, norm_out, proj_out: resident in the compute dtype");
    denoise.tensor("prompt embeddings", {B, L, tc.context_in_dim}, dt, passes, MemorySide::device,
                   in.prompt_tokens_known ? "per guidance branch" : "a text prompt's length is known after tokenizing: assumed");
    denoise.tensor("latents", {B, T, C}, dt, 1 + passes, MemorySide::device, "the latents and each branch's prediction");
    denoise.tensor("RoPE table", {S, tc.attention_head_dim / 2}, at::kComplexFloat, 1, MemorySide::device,
                   "per-token rotary frequencies of the joint sequence");
    if (in.kv_cache)
        denoise.tensor("prefix KV cache", {B, prefix, D}, dt, 2 * tc.num_layers * passes,
                       in.kv_cache_on_host ? MemorySide::host : MemorySide::device,
                       "K and V of the condition prefix, per layer and guidance branch, kept from step 0");
    denoise.tensor("hidden state", {B, S, D}, dt, 1, MemorySide::device, "the block's input");
    denoise.tensor("modulation rows", {B, S, D}, dt, 4, MemorySide::device,
                   "scale and gate of both halves, selected per token (the target's rows, the prefix's zero row)");
    // The block's working set (run_block), whichever half is larger: the attention half holds the normalised input,
    // q, k, v and up to three temporaries (rms-norm, RoPE, the attention output and its concatenation); the MLP half
    // holds the normalised input, the attention output, the residual, the normalised residual, and, all within one
    // full-expression (C++ keeps its temporaries to its end), the gate projection, its SiLU, the up projection, their
    // product and the down projection.
    const std::uint64_t attention = 7ull * std::uint64_t(D);
    const std::uint64_t mlp = 5ull * std::uint64_t(D) + 4ull * std::uint64_t(hidden);
    if (attention >= mlp)
        denoise.tensor("block working set (attention)", {B, S, D}, dt, 7, MemorySide::device,
                       "normalised input, q, k, v and three temporaries");
    else
        denoise.tensor("block working set (MLP)", {B, S, 5 * D + 4 * hidden}, dt, 1, MemorySide::device,
                       "five [B, S, D] (normalised input, attention output, residual, normalised residual, down "
                       "projection) and four [B, S, D x mlp_ratio] (gate, SiLU, up, product)");

    if (const auto * cache = in.step_cache)  // each guidance branch's pass keeps its own
        denoise.bytes("step cache", std::uint64_t(passes) * cache->kept_bytes({{B, S, D}}, dt), MemorySide::device,
                      "what cache." + std::string(to_string(cache->settings().kind)) +
                          " keeps between passes, per guidance branch (StepCache::kept_bytes)");
    model::StageMemory decode("decode");
    const auto & vc = m.vae_config;
    const std::uint64_t vae_weights = spec_bytes(vae_decoder_spec(vc), dt);
    const bool leaf = in.vae.strategy == VaeStrategy::leaf_offload;
    decode.bytes("VAE decoder weights", vae_weights, leaf ? MemorySide::host : MemorySide::device,
                 leaf ? "leaf_offload: held on the host, one leaf on the device at a time" : "resident in the compute dtype");
    decode.tensor("latents", {B, T, C}, dt, 2, MemorySide::device, "the denoised latents and their unpacked copy");
    decode.tensor("prompt embeddings", {B, L, tc.context_in_dim}, dt, passes, MemorySide::device,
                  "kept for the next generation (runtime.generation_repeats)");
    std::int64_t w = width, h = height;
    if (in.vae.strategy == VaeStrategy::tiled) {
        w = std::min(width, in.vae.tiling.tile_sample_min_width);
        h = std::min(height, in.vae.tiling.tile_sample_min_height);
        decode.tensor("decoded tiles", {B, vc.out_channels > 3 ? 3 : vc.out_channels, height, width}, dt, 2, MemorySide::device,
                      "the decoded tiles and the blended image");
    }
    decode.bytes("decode activations", estimate_decode_activation_bytes(vc, B, w, h, dt), MemorySide::device,
                 "the largest up stage's input and output with two temporaries (Note [VAE auto]) at " + std::to_string(w) + "x" +
                     std::to_string(h));
    decode.tensor("image", {B, 3, height, width}, dt, 2, MemorySide::device, "the decoded image and its scaled copy");
    out.push_back(denoise);
    out.push_back(decode);
    return out;
}

}  // namespace ddo::qwen_image_21
