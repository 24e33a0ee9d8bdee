// LTX2ImageTransformer2DModel forward split into prepare / run_block / finish (reference: the composed
// LTX2ImageTransformer2DModel of tools/reference/ltx2_image_fixtures.py, i.e. diffusers 0.42.1
// LTX2VideoTransformer3DModel.forward / LTX2VideoTransformerBlock.forward with the audio stream removed).
#include "image_transformer.hpp"

#include <string>

#include "ddo/error.hpp"
#include "transformer_specs.hpp"

namespace ddo::ltx2 {
namespace {

void add_attention(TensorSpecs & s, const TransformerConfig & c, const std::string & p, int64_t kv_dim) {
    const int64_t d = c.inner_dim();
    add_linear_spec(s, p + ".to_q", d, d, c.attention_bias);
    add_linear_spec(s, p + ".to_k", d, kv_dim, c.attention_bias);
    add_linear_spec(s, p + ".to_v", d, kv_dim, c.attention_bias);
    add_linear_spec(s, p + ".to_out.0", d, d, c.attention_out_bias);
    s.push_back({p + ".norm_q.weight", {d}});
    s.push_back({p + ".norm_k.weight", {d}});
    if (c.gated_attn) add_linear_spec(s, p + ".to_gate_logits", c.num_attention_heads, d);
}

TensorSpecs global_specs(const TransformerConfig & c) {
    const int64_t d = c.inner_dim();
    TensorSpecs s;
    add_linear_spec(s, "proj_in", d, c.in_channels);
    add_adaln_spec(s, "time_embed", d, c.video_mod_params());
    s.push_back({"scale_shift_table", {2, d}});
    if (c.prompt_adaln()) add_adaln_spec(s, "prompt_adaln", d, 2);
    add_linear_spec(s, "proj_out", c.out_channels, d);
    return s;
}

AttentionSpec attn_spec(const TransformerConfig & c, const std::string & prefix) {
    return {prefix, c.num_attention_heads, c.gated_attn, c.attention_bias, c.attention_out_bias, c.norm_eps};
}

}  // namespace

TransformerConfig image_transformer_config(const nlohmann::json & j, const std::filesystem::path & file) {
    // The video DiT's reader with the image model's defaults; the audio stream does not exist.
    nlohmann::json v = j;
    if (!v.contains("cross_attn_mod") || v.at("cross_attn_mod").is_null()) v["cross_attn_mod"] = true;
    v["use_prompt_embeddings"] = false;  // LTX2ImageTransformer2DModel has no caption_projection
    v["perturbed_attn"] = true;          // attn1 always runs LTX2PerturbedAttnProcessor
    v["audio_cross_attn_mod"] = false;
    auto c = TransformerConfig::from_json(v, file);
    if (c.cross_attention_dim != c.inner_dim())
        ConfigReader(v, file).fail("cross_attention_dim",
                                   "is " + std::to_string(c.cross_attention_dim) +
                                       "; the image model modulates the text with inner-width prompt tables, so it must "
                                       "equal num_attention_heads * attention_head_dim (" +
                                       std::to_string(c.inner_dim()) + ")");
    return c;
}

TransformerConfig image_transformer_config_from_file(const std::filesystem::path & config_json) {
    return image_transformer_config(read_config_json(config_json), config_json);
}

TensorSpecs image_block_specs(const TransformerConfig & c, int64_t i) {
    const int64_t d = c.inner_dim();
    const std::string p = dit_block_prefix(i) + ".";
    TensorSpecs s;
    add_attention(s, c, p + "attn1", d);
    add_attention(s, c, p + "attn2", c.cross_attention_dim);
    add_linear_spec(s, p + "ff.net.0.proj", 4 * d, d, c.ff_bias);
    add_linear_spec(s, p + "ff.net.2", d, 4 * d, c.ff_bias);
    s.push_back({p + "scale_shift_table", {c.video_mod_params(), d}});
    s.push_back({p + "prompt_scale_shift_table", {2, d}});
    return s;
}

TensorSpecs image_transformer_specs(const TransformerConfig & c) {
    return dit_tensor_specs(c, global_specs(c), image_block_specs);
}

void validate_image_transformer(const model::TensorFile & f, const TransformerConfig & c) {
    validate_tensors(f, image_transformer_specs(c), "LTX-2 image transformer");
}

std::vector<model::GroupSpec> image_transformer_groups(const TransformerConfig & c) {
    return dit_groups(c, global_specs(c), image_block_specs);
}

ImageTransformerState image_prepare(const TransformerConfig & c, Weights & w, const ImageTransformerInputs & in) {
    const Weights::Scope scope(w, "globals");
    const auto dev = w.device();
    const auto dt = w.dtype();
    auto x = in.hidden_states.to(dev, dt);
    const int64_t batch = x.size(0);
    if (in.height * in.width != x.size(1))
        throw UsageError("LTX-2 image transformer: " + std::to_string(x.size(1)) + " tokens for a latent grid of " +
                         std::to_string(in.height) + " x " + std::to_string(in.width));
    ImageTransformerState s;
    // Binary [B, L] text mask -> additive (1 - m) * -10000, [B, 1, L].
    if (in.encoder_attention_mask)
        s.text_mask = ((1 - in.encoder_attention_mask->to(dev, dt)) * -10000.0).unsqueeze(1);
    // Video RoPE for one frame at 24 fps (prepare_video_coords(B, 1, h, w, fps=24)).
    s.rope = rope_tables(video_rope(c), video_coords(c, batch, 1, in.height, in.width, 24.0, dev));
    x = linear(w, "proj_in", x);
    auto view3 = [&](const at::Tensor & t) { return t.view({batch, -1, t.size(-1)}); };
    auto [temb, emb] = adaln_single(w, "time_embed", in.timestep.flatten());
    s.temb = view3(temb);
    s.embedded_timestep = view3(emb);
    if (c.prompt_adaln()) s.temb_prompt = view3(adaln_single(w, "prompt_adaln", in.timestep.flatten()).first);
    s.text = in.encoder_hidden_states.to(dev, dt);
    s.pag_blocks = {in.pag_blocks.begin(), in.pag_blocks.end()};
    if (!s.pag_blocks.empty() || in.perturbation_mask) {
        auto m = in.perturbation_mask ? in.perturbation_mask->to(dev, dt) : at::zeros({batch}, x.options());
        m = m.view({-1, 1, 1});
        s.perturbation = Perturbation{m, (m == 0).all().item<bool>()};
    }
    s.x = x;
    return s;
}

void image_run_block(const TransformerConfig & c, Weights & w, int64_t i, ImageTransformerState & s,
                     const ModuleHook & hook) {
    auto hooked = [&](const char * module, const std::function<at::Tensor()> & compute) {
        return hook ? hook(module, compute) : compute();
    };
    const std::string p = dit_block_prefix(i);
    const Weights::Scope scope(w, p);
    const int64_t batch = s.x.size(0);
    const double eps = c.norm_eps;
    auto x = s.x;
    std::optional<Perturbation> perturb;
    if (s.pag_blocks.count(i)) perturb = s.perturbation;

    // 1. Self-attention (PAG: the perturbed samples take the value projection in pag_blocks).
    auto vp = mod_params(w.get(p + ".scale_shift_table"), s.temb, batch);
    auto h = rms_norm(x, eps) * (1 + vp[1]) + vp[0];
    // A hooked attn1 wraps the whole module call, the PAG value passthrough of the perturbed samples included.
    x = x + hooked("attn1", [&] {
                return attention(w, attn_spec(c, p + ".attn1"), h, std::nullopt, std::nullopt, &s.rope, nullptr, perturb);
            }) * vp[2];

    // 2. Prompt K/V modulation (table + prompt AdaLN, or the table alone), text cross-attention.
    const auto table = w.get(p + ".prompt_scale_shift_table");
    const auto kv = s.temb_prompt ? mod_params(table, *s.temb_prompt, batch) : table.unsqueeze(0).unsqueeze(0).unbind(2);
    const auto text = s.text * (1 + kv[1]) + kv[0];
    h = rms_norm(x, eps);
    if (c.cross_attn_mod) h = h * (1 + vp[7]) + vp[6];
    auto o = hooked("attn2", [&] { return attention(w, attn_spec(c, p + ".attn2"), h, text, s.text_mask, nullptr, nullptr); });
    if (c.cross_attn_mod) o = o * vp[8];
    x = x + o;

    // 3. Feed-forward.
    h = rms_norm(x, eps) * (1 + vp[4]) + vp[3];
    s.x = x + hooked("ff", [&] { return feed_forward(w, p + ".ff", h, c.ff_bias); }) * vp[5];
}

at::Tensor image_finish(const TransformerConfig & /*c*/, Weights & w, const ImageTransformerState & s,
                        const ModuleHook & hook) {
    const Weights::Scope scope(w, "globals");
    auto v = w.get("scale_shift_table").unsqueeze(0).unsqueeze(0) + s.embedded_timestep.unsqueeze(2);  // [B,T,2,D]
    auto n = at::layer_norm(s.x, {s.x.size(-1)}, {}, {}, 1e-6);
    const auto x = n * (1 + v.select(2, 1)) + v.select(2, 0);
    auto projection = [&] { return linear(w, "proj_out", x); };
    return hook ? hook("proj_out", projection) : projection();
}

std::vector<std::string> image_diffusers_module_names(const TransformerConfig & c) {
    std::vector<std::string> n = {"", "proj_in"};
    auto adaln = [&](const std::string & p) {
        for (const char * m : {"", ".emb", ".emb.time_proj", ".emb.timestep_embedder", ".emb.timestep_embedder.linear_1",
                               ".emb.timestep_embedder.act", ".emb.timestep_embedder.linear_2", ".silu", ".linear"})
            n.push_back(p + m);
    };
    adaln("time_embed");
    if (c.prompt_adaln()) adaln("prompt_adaln");
    n.push_back("rope");
    n.push_back("transformer_blocks");
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = dit_block_prefix(i);
        n.push_back(b);
        for (const auto & [norm, attn] : {std::pair{".norm1", ".attn1"}, std::pair{".norm2", ".attn2"}}) {
            n.push_back(b + norm);
            for (const char * m : {"", ".norm_q", ".norm_k", ".to_q", ".to_k", ".to_v", ".to_out", ".to_out.0",
                                   ".to_out.1"})
                n.push_back(b + attn + m);
            if (c.gated_attn) n.push_back(b + attn + ".to_gate_logits");
        }
        n.push_back(b + ".norm3");
        for (const char * m : {"", ".net", ".net.0", ".net.0.proj", ".net.1", ".net.2"}) n.push_back(b + ".ff" + m);
    }
    n.push_back("norm_out");
    n.push_back("proj_out");
    return n;
}

std::vector<std::string> image_hookable_module_names(const TransformerConfig & c) {
    std::vector<std::string> n;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = dit_block_prefix(i);
        for (const char * m : {"", ".attn1", ".attn2", ".ff"}) n.push_back(b + m);
    }
    n.push_back("proj_out");
    return n;
}

at::Tensor image_forward(const TransformerConfig & c, Weights & w, const ImageTransformerInputs & in,
                         model::StepCache * cache, const std::string & branch, int step) {
    auto s = image_prepare(c, w, in);
    // taylorseer (Note [Step caching]): the hooked submodules by their diffusers names, in this guidance branch.
    const bool modules = cache && cache->settings().kind == model::StepCacheKind::taylorseer;
    auto module_hook = [&](std::string prefix) -> ModuleHook {
        if (!modules) return {};
        return [cache, &branch, prefix = std::move(prefix)](const char * m, const std::function<at::Tensor()> & compute) {
            return cache->module(branch, prefix + m, [&] { return model::Outputs{compute()}; }).outputs.front();
        };
    };
    if (cache) {
        // The block is single-stream (the image tokens; the text is read, not returned): its one hidden state is the
        // cache's stream, over the whole guidance batch as the reference's one forward under cache_context.
        s.x = cache
                  ->run(branch, step, {s.x}, c.num_layers,
                        [&](int64_t i, const model::Streams & x) {
                            s.x = x.front();
                            image_run_block(c, w, i, s, module_hook(dit_block_prefix(i) + "."));
                            return model::Streams{s.x};
                        },
                        [&](int64_t i) { return w.skip(dit_block_prefix(i)); })
                  .front();
    } else {
        for (int64_t i = 0; i < c.num_layers; ++i) image_run_block(c, w, i, s);
    }
    return image_finish(c, w, s, module_hook(""));
}

}  // namespace ddo::ltx2
