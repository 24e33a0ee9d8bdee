// LTX2VideoTransformer3DModel forward split into prepare / run_block / finish (reference: diffusers 0.42.1
// transformer_ltx2.py; the numbered steps follow LTX2VideoTransformer3DModel.forward and
// LTX2VideoTransformerBlock.forward).
#include "transformer.hpp"

#include <cmath>
#include <unordered_set>

#include "ddo/error.hpp"
#include "transformer_specs.hpp"

namespace ddo::ltx2 {
namespace {

constexpr int64_t kTimeProjChannels = 256;  // PixArtAlphaCombinedTimestepSizeEmbeddings.time_proj

void add_attention(TensorSpecs & s, const TransformerConfig & c, const std::string & p, int64_t q_dim, int64_t kv_dim,
                   int64_t heads, int64_t head_dim, bool gated) {
    const int64_t inner = heads * head_dim;
    add_linear_spec(s, p + ".to_q", inner, q_dim, c.attention_bias);
    add_linear_spec(s, p + ".to_k", inner, kv_dim, c.attention_bias);
    add_linear_spec(s, p + ".to_v", inner, kv_dim, c.attention_bias);
    add_linear_spec(s, p + ".to_out.0", q_dim, inner, c.attention_out_bias);
    s.push_back({p + ".norm_q.weight", {inner}});
    s.push_back({p + ".norm_k.weight", {inner}});
    if (gated) add_linear_spec(s, p + ".to_gate_logits", heads, q_dim);
}

void add_ff(TensorSpecs & s, const std::string & p, int64_t dim, bool bias) {
    add_linear_spec(s, p + ".net.0.proj", 4 * dim, dim, bias);
    add_linear_spec(s, p + ".net.2", dim, 4 * dim, bias);
}

TensorSpecs global_specs(const TransformerConfig & c) {
    const int64_t d = c.inner_dim(), da = c.audio_inner_dim();
    TensorSpecs s;
    add_linear_spec(s, "proj_in", d, c.in_channels);
    add_linear_spec(s, "audio_proj_in", da, c.audio_in_channels);
    if (c.use_keyframes_abs_pos_embedding) s.push_back({"keyframes_abs_pos_embedding", {1, d}});
    if (c.use_prompt_embeddings) {
        add_linear_spec(s, "caption_projection.linear_1", d, c.caption_channels);
        add_linear_spec(s, "caption_projection.linear_2", d, d);
        add_linear_spec(s, "audio_caption_projection.linear_1", da, c.caption_channels);
        add_linear_spec(s, "audio_caption_projection.linear_2", da, da);
    }
    add_adaln_spec(s, "time_embed", d, c.video_mod_params());
    add_adaln_spec(s, "audio_time_embed", da, c.audio_mod_params());
    add_adaln_spec(s, "av_cross_attn_video_scale_shift", d, 4);
    add_adaln_spec(s, "av_cross_attn_audio_scale_shift", da, 4);
    add_adaln_spec(s, "av_cross_attn_video_a2v_gate", d, 1);
    add_adaln_spec(s, "av_cross_attn_audio_v2a_gate", da, 1);
    s.push_back({"scale_shift_table", {2, d}});
    s.push_back({"audio_scale_shift_table", {2, da}});
    if (c.prompt_adaln()) {
        add_adaln_spec(s, "prompt_adaln", d, 2);
        add_adaln_spec(s, "audio_prompt_adaln", da, 2);
    }
    add_linear_spec(s, "proj_out", c.out_channels, d);
    add_linear_spec(s, "audio_proj_out", c.audio_out_channels, da);
    return s;
}

TensorSpecs block_specs(const TransformerConfig & c, int64_t i) {
    const int64_t d = c.inner_dim(), da = c.audio_inner_dim();
    const int64_t h = c.num_attention_heads, hd = c.attention_head_dim;
    const int64_t ha = c.audio_num_attention_heads, hda = c.audio_attention_head_dim;
    const std::string p = dit_block_prefix(i) + ".";
    TensorSpecs s;
    add_attention(s, c, p + "attn1", d, d, h, hd, c.gated_attn);
    add_attention(s, c, p + "audio_attn1", da, da, ha, hda, c.audio_gated_attn);
    add_attention(s, c, p + "attn2", d, c.cross_attention_dim, h, hd, c.gated_attn);
    add_attention(s, c, p + "audio_attn2", da, c.audio_cross_attention_dim, ha, hda, c.audio_gated_attn);
    add_attention(s, c, p + "audio_to_video_attn", d, da, ha, hda, c.gated_attn);
    add_attention(s, c, p + "video_to_audio_attn", da, d, ha, hda, c.audio_gated_attn);
    add_ff(s, p + "ff", d, c.ff_bias);
    add_ff(s, p + "audio_ff", da, c.audio_ff_bias);
    s.push_back({p + "scale_shift_table", {c.video_mod_params(), d}});
    s.push_back({p + "audio_scale_shift_table", {c.audio_mod_params(), da}});
    if (c.prompt_modulation()) {
        s.push_back({p + "prompt_scale_shift_table", {2, d}});
        s.push_back({p + "audio_prompt_scale_shift_table", {2, da}});
    }
    s.push_back({p + "video_a2v_cross_attn_scale_shift_table", {5, d}});
    s.push_back({p + "audio_a2v_cross_attn_scale_shift_table", {5, da}});
    return s;
}

// get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0): [N, 256] fp32 (cos | sin).
at::Tensor time_proj(const at::Tensor & t) {
    const int64_t half = kTimeProjChannels / 2;
    auto exponent = -std::log(10000.0) * at::arange(0, half, t.options().dtype(at::kFloat));
    exponent = exponent / double(half);
    auto emb = t.unsqueeze(1).to(at::kFloat) * at::exp(exponent).unsqueeze(0);
    return at::cat({at::cos(emb), at::sin(emb)}, -1);
}

// Binary [B, L] text mask -> additive (1 - m) * -10000, [B, 1, L].
std::optional<at::Tensor> additive_mask(const std::optional<at::Tensor> & m, const at::Tensor & like) {
    if (!m) return std::nullopt;
    if (m->dim() != 2) return m->to(like.device(), like.scalar_type());
    return ((1 - m->to(like.device(), like.scalar_type())) * -10000.0).unsqueeze(1);
}

AttentionSpec attn_spec(const TransformerConfig & c, const std::string & prefix, int64_t heads, bool gated) {
    return {prefix, heads, gated, c.attention_bias, c.attention_out_bias, c.norm_eps};
}

// One submodule call through `hook` (taylorseer), or computed when there is none.
at::Tensor hooked(const ModuleHook & hook, const char * module, const std::function<at::Tensor()> & compute) {
    return hook ? hook(module, compute) : compute();
}

}  // namespace

void add_linear_spec(TensorSpecs & s, const std::string & p, int64_t out, int64_t in, bool bias) {
    s.push_back({p + ".weight", {out, in}});
    if (bias) s.push_back({p + ".bias", {out}});
}

void add_adaln_spec(TensorSpecs & s, const std::string & p, int64_t dim, int64_t n) {
    add_linear_spec(s, p + ".emb.timestep_embedder.linear_1", dim, kTimeProjChannels);
    add_linear_spec(s, p + ".emb.timestep_embedder.linear_2", dim, dim);
    add_linear_spec(s, p + ".linear", n * dim, dim);
}

std::string dit_block_prefix(int64_t i) { return "transformer_blocks." + std::to_string(i); }

TensorSpecs dit_tensor_specs(const TransformerConfig & c, TensorSpecs globals, BlockSpecs block) {
    for (int64_t i = 0; i < c.num_layers; ++i) {
        auto b = block(c, i);
        globals.insert(globals.end(), b.begin(), b.end());
    }
    return globals;
}

std::vector<model::GroupSpec> dit_groups(const TransformerConfig & c, const TensorSpecs & globals, BlockSpecs block) {
    std::vector<model::GroupSpec> g;
    g.push_back({"globals", {}});
    for (const auto & [name, shape] : globals) g[0].tensors.push_back(name);
    for (int64_t i = 0; i < c.num_layers; ++i) {
        model::GroupSpec b{dit_block_prefix(i), {}};
        for (const auto & [name, shape] : block(c, i)) b.tensors.push_back(name);
        g.push_back(std::move(b));
    }
    return g;
}

std::vector<at::Tensor> mod_params(const at::Tensor & table, const at::Tensor & temb, int64_t batch) {
    const int64_t n = table.size(0);
    auto v = table.unsqueeze(0).unsqueeze(0) + temb.reshape({batch, temb.size(1), n, -1});
    return v.unbind(2);
}

void validate_tensors(const model::TensorFile & f, const TensorSpecs & specs, const std::string & component) {
    std::vector<std::string> names;
    for (const auto & [name, shape] : specs) names.push_back(name);
    f.require_known(names, component);  // a file given with --transformer: another model's tensors, named first
    std::unordered_set<std::string> expected;
    for (const auto & [name, shape] : specs) {
        expected.insert(name);
        try {
            f.check(name, shape);
        } catch (const Error & e) {
            throw RuntimeError(component + " checkpoint does not match its config.json: " + e.what());
        }
    }
    for (const auto & name : f.names())
        if (!expected.count(name))
            throw RuntimeError(component + " checkpoint does not match its config.json: unexpected tensor '" + name +
                               "' in " + f.file_of(name).string() +
                               " (the config implies no such tensor; is config.json from another model version?)");
}

TensorSpecs tensor_specs(const TransformerConfig & c) { return dit_tensor_specs(c, global_specs(c), block_specs); }

void validate_transformer(const model::TensorFile & f, const TransformerConfig & c) {
    validate_tensors(f, tensor_specs(c), "LTX-2 transformer");
}

std::vector<model::GroupSpec> transformer_groups(const TransformerConfig & c) {
    return dit_groups(c, global_specs(c), block_specs);
}

std::pair<at::Tensor, at::Tensor> adaln_single(Weights & w, const std::string & prefix, const at::Tensor & timestep) {
    auto proj = time_proj(timestep.to(w.device())).to(w.dtype());
    const std::string e = prefix + ".emb.timestep_embedder.";
    auto emb = linear(w, e + "linear_2", at::silu(linear(w, e + "linear_1", proj)));
    return {linear(w, prefix + ".linear", at::silu(emb)), emb};
}

namespace {

// Step 1 of prepare: the video, audio and cross-modal RoPE tables from the coordinates (given, or from the grid).
void rope_from_inputs(const TransformerConfig & c, const TransformerInputs & in, int64_t batch, at::Device dev,
                      TransformerState & s) {
    at::Tensor vc, ac;
    if (in.video_coords) {
        vc = in.video_coords->to(dev, at::kFloat);
    } else {
        if (!in.num_frames || !in.height || !in.width)
            throw UsageError("LTX-2 transformer: pass video_coords or num_frames, height and width (latent grid)");
        vc = video_coords(c, batch, *in.num_frames, *in.height, *in.width, in.fps, dev);
    }
    if (in.audio_coords) {
        ac = in.audio_coords->to(dev, at::kFloat);
    } else {
        if (!in.audio_num_frames)
            throw UsageError("LTX-2 transformer: pass audio_coords or audio_num_frames (latent audio frames)");
        ac = audio_coords(c, batch, *in.audio_num_frames, dev);
    }
    s.video_rope = rope_tables(video_rope(c), vc);
    s.audio_rope = rope_tables(audio_rope(c), ac);
    s.cross_video_rope = rope_tables(cross_video_rope(c), vc.slice(1, 0, 1));
    s.cross_audio_rope = rope_tables(cross_audio_rope(c), ac.slice(1, 0, 1));
}

// Step 3 of prepare: the timestep embeddings and modulation of both streams, the prompt AdaLN and the a2v/v2a
// scale-shift and gates.
void embed_timesteps(const TransformerConfig & c, Weights & w, const TransformerInputs & in, int64_t batch,
                     TransformerState & s) {
    const auto audio_timestep = in.audio_timestep ? *in.audio_timestep : in.timestep;
    const auto audio_sigma = in.audio_sigma ? in.audio_sigma : in.sigma;
    const double gate_factor = c.cross_attn_timestep_scale_multiplier / c.timestep_scale_multiplier;
    auto view3 = [&](const at::Tensor & t) { return t.view({batch, -1, t.size(-1)}); };
    auto [temb, emb] = adaln_single(w, "time_embed", in.timestep.flatten());
    s.temb = view3(temb);
    s.embedded_timestep = view3(emb);
    auto [temb_a, emb_a] = adaln_single(w, "audio_time_embed", audio_timestep.flatten());
    s.temb_audio = view3(temb_a);
    s.audio_embedded_timestep = view3(emb_a);
    if (c.prompt_adaln()) {
        s.temb_prompt = view3(adaln_single(w, "prompt_adaln", in.sigma->flatten()).first);
        s.temb_prompt_audio = view3(adaln_single(w, "audio_prompt_adaln", audio_sigma->flatten()).first);
    }
    const auto video_ca_t = in.use_cross_timestep ? audio_sigma->flatten() : in.timestep.flatten();
    s.temb_ca_scale_shift = view3(adaln_single(w, "av_cross_attn_video_scale_shift", video_ca_t).first);
    s.temb_ca_gate = view3(adaln_single(w, "av_cross_attn_video_a2v_gate", video_ca_t * gate_factor).first);
    const auto audio_ca_t = in.use_cross_timestep ? in.sigma->flatten() : audio_timestep.flatten();
    s.temb_ca_audio_scale_shift = view3(adaln_single(w, "av_cross_attn_audio_scale_shift", audio_ca_t).first);
    s.temb_ca_audio_gate = view3(adaln_single(w, "av_cross_attn_audio_v2a_gate", audio_ca_t * gate_factor).first);
}

}  // namespace

TransformerState prepare(const TransformerConfig & c, Weights & w, const TransformerInputs & in) {
    const Weights::Scope scope(w, "globals");
    const auto dev = w.device();
    const auto dt = w.dtype();
    auto x = in.hidden_states.to(dev, dt);
    auto a = in.audio_hidden_states.to(dev, dt);
    const int64_t batch = x.size(0);
    const auto audio_sigma = in.audio_sigma ? in.audio_sigma : in.sigma;
    if ((c.prompt_adaln() || in.use_cross_timestep) && (!in.sigma || !audio_sigma))
        throw UsageError("LTX-2 transformer: sigma is required (prompt AdaLN of cross_attn_mod checkpoints, or "
                         "use_cross_timestep); pass the step's sigma * 1000 as sigma");

    TransformerState s;
    // 0. Text masks -> additive [B, 1, L].
    s.text_mask = additive_mask(in.encoder_attention_mask, x);
    s.audio_text_mask = additive_mask(in.audio_encoder_attention_mask, a);

    // 1. RoPE.
    rope_from_inputs(c, in, batch, dev, s);

    // 2. Input projections (+ 2.5 keyframe marker).
    x = linear(w, "proj_in", x);
    a = linear(w, "audio_proj_in", a);
    if (c.use_keyframes_abs_pos_embedding && in.video_keyframes_mask) {
        auto marker = (in.video_keyframes_mask->to(dev) > 0).to(dt);
        x = x + marker * w.get("keyframes_abs_pos_embedding");
    }

    // 3. Timestep embeddings and modulation.
    embed_timesteps(c, w, in, batch, s);

    // 4. Prompt embeddings (2.0 caption projections).
    s.text = in.encoder_hidden_states.to(dev, dt);
    s.audio_text = in.audio_encoder_hidden_states.to(dev, dt);
    if (c.use_prompt_embeddings) {
        auto project = [&](const std::string & p, const at::Tensor & t) {
            return linear(w, p + ".linear_2", at::gelu(linear(w, p + ".linear_1", t), "tanh"));
        };
        s.text = project("caption_projection", s.text).view({batch, -1, x.size(-1)});
        s.audio_text = project("audio_caption_projection", s.audio_text).view({batch, -1, a.size(-1)});
    }

    // 5. Block switches: a2v/v2a, STG.
    s.use_a2v = s.use_v2a = !in.isolate_modalities;
    s.stg_blocks = {in.spatio_temporal_guidance_blocks.begin(), in.spatio_temporal_guidance_blocks.end()};
    if (c.perturbed_attn && (!s.stg_blocks.empty() || in.perturbation_mask)) {
        auto m = in.perturbation_mask ? in.perturbation_mask->to(dev, dt) : at::zeros({batch}, x.options());
        if (m.dim() == 1) m = m.view({-1, 1, 1});
        s.perturbation = Perturbation{m, (m == 0).all().item<bool>()};
    }
    s.x = x;
    s.a = a;
    return s;
}

namespace {

// Step 2 of run_block: the text cross-attention of both streams, with the 2.3 prompt K/V modulation (shift, scale).
void text_cross_attention(const TransformerConfig & c, Weights & w, const std::string & p, const TransformerState & s,
                          const std::vector<at::Tensor> & vp, const std::vector<at::Tensor> & ap, at::Tensor & x,
                          at::Tensor & a, const ModuleHook & hook) {
    const int64_t batch = s.x.size(0);
    const double eps = c.norm_eps;
    auto text = s.text;
    auto audio_text = s.audio_text;
    if (c.prompt_modulation()) {
        auto prompt = [&](const std::string & table, const std::optional<at::Tensor> & temb) {
            auto t = w.get(p + "." + table);
            if (temb) return mod_params(t, *temb, batch);
            return t.unsqueeze(0).unsqueeze(0).unbind(2);
        };
        auto kv = prompt("prompt_scale_shift_table", s.temb_prompt);
        text = text * (1 + kv[1]) + kv[0];
        auto akv = prompt("audio_prompt_scale_shift_table", s.temb_prompt_audio);
        audio_text = audio_text * (1 + akv[1]) + akv[0];
    }
    auto h = rms_norm(x, eps);
    if (c.cross_attn_mod) h = h * (1 + vp[7]) + vp[6];
    auto o = hooked(hook, "attn2", [&] {
        return attention(w, attn_spec(c, p + ".attn2", c.num_attention_heads, c.gated_attn), h, text, s.text_mask,
                         nullptr, nullptr);
    });
    if (c.cross_attn_mod) o = o * vp[8];
    x = x + o;
    h = rms_norm(a, eps);
    if (c.audio_cross_attn_mod) h = h * (1 + ap[7]) + ap[6];
    o = hooked(hook, "audio_attn2", [&] {
        return attention(w, attn_spec(c, p + ".audio_attn2", c.audio_num_attention_heads, c.audio_gated_attn), h,
                         audio_text, s.audio_text_mask, nullptr, nullptr);
    });
    if (c.audio_cross_attn_mod) o = o * ap[8];
    a = a + o;
}

// Step 3 of run_block, a2v / v2a: both norms from the streams before either update; tables (scale, shift, scale,
// shift | gate).
void av_cross_attention(const TransformerConfig & c, Weights & w, const std::string & p, const TransformerState & s,
                        at::Tensor & x, at::Tensor & a, const ModuleHook & hook) {
    const int64_t batch = s.x.size(0);
    const double eps = c.norm_eps;
    auto nx = rms_norm(x, eps);
    auto na = rms_norm(a, eps);
    auto vt = w.get(p + ".video_a2v_cross_attn_scale_shift_table");
    auto at_ = w.get(p + ".audio_a2v_cross_attn_scale_shift_table");
    auto vca = mod_params(vt.slice(0, 0, 4), s.temb_ca_scale_shift, batch);
    auto a2v_gate = mod_params(vt.slice(0, 4), s.temb_ca_gate, batch)[0];
    auto aca = mod_params(at_.slice(0, 0, 4), s.temb_ca_audio_scale_shift, batch);
    auto v2a_gate = mod_params(at_.slice(0, 4), s.temb_ca_audio_gate, batch)[0];
    if (s.use_a2v) {
        auto q = nx * (1 + vca[0]) + vca[1];
        auto kv = na * (1 + aca[0]) + aca[1];
        x = x + a2v_gate * hooked(hook, "audio_to_video_attn", [&] {
                    return attention(w, attn_spec(c, p + ".audio_to_video_attn", c.audio_num_attention_heads,
                                                  c.gated_attn),
                                     q, kv, std::nullopt, &s.cross_video_rope, &s.cross_audio_rope);
                });
    }
    if (s.use_v2a) {
        auto kv = nx * (1 + vca[2]) + vca[3];
        auto q = na * (1 + aca[2]) + aca[3];
        a = a + v2a_gate * hooked(hook, "video_to_audio_attn", [&] {
                    return attention(w, attn_spec(c, p + ".video_to_audio_attn", c.audio_num_attention_heads,
                                                  c.audio_gated_attn),
                                     q, kv, std::nullopt, &s.cross_audio_rope, &s.cross_video_rope);
                });
    }
}

}  // namespace

void run_block(const TransformerConfig & c, Weights & w, int64_t i, TransformerState & s, const ModuleHook & hook) {
    const std::string p = dit_block_prefix(i);
    const Weights::Scope scope(w, p);
    const int64_t batch = s.x.size(0);
    const double eps = c.norm_eps;
    auto x = s.x;
    auto a = s.a;
    std::optional<Perturbation> perturb;
    if (c.perturbed_attn && s.stg_blocks.count(i)) perturb = s.perturbation;

    // 1.1 Video self-attention.
    auto vp = mod_params(w.get(p + ".scale_shift_table"), s.temb, batch);
    auto h = rms_norm(x, eps) * (1 + vp[1]) + vp[0];
    // A hooked attention wraps the whole module call, the STG value passthrough of a perturbed pass included.
    x = x + hooked(hook, "attn1", [&] {
                return attention(w, attn_spec(c, p + ".attn1", c.num_attention_heads, c.gated_attn), h, std::nullopt,
                                 std::nullopt, &s.video_rope, nullptr, perturb);
            }) * vp[2];
    // 1.2 Audio self-attention.
    auto ap = mod_params(w.get(p + ".audio_scale_shift_table"), s.temb_audio, batch);
    h = rms_norm(a, eps) * (1 + ap[1]) + ap[0];
    a = a + hooked(hook, "audio_attn1", [&] {
                return attention(w, attn_spec(c, p + ".audio_attn1", c.audio_num_attention_heads, c.audio_gated_attn),
                                 h, std::nullopt, std::nullopt, &s.audio_rope, nullptr, perturb);
            }) * ap[2];

    // 2. Text cross-attention; 2.3 prompt K/V modulation (shift, scale).
    text_cross_attention(c, w, p, s, vp, ap, x, a, hook);

    // 3. a2v / v2a.
    if (s.use_a2v || s.use_v2a) av_cross_attention(c, w, p, s, x, a, hook);

    // 4. Feed-forward.
    h = rms_norm(x, eps) * (1 + vp[4]) + vp[3];
    x = x + hooked(hook, "ff", [&] { return feed_forward(w, p + ".ff", h, c.ff_bias); }) * vp[5];
    h = rms_norm(a, eps) * (1 + ap[4]) + ap[3];
    a = a + hooked(hook, "audio_ff", [&] { return feed_forward(w, p + ".audio_ff", h, c.audio_ff_bias); }) * ap[5];
    s.x = x;
    s.a = a;
}

std::pair<at::Tensor, at::Tensor> finish(const TransformerConfig & /*c*/, Weights & w, const TransformerState & s,
                                         const ModuleHook & hook) {
    const Weights::Scope scope(w, "globals");
    auto out = [&](const std::string & table, const at::Tensor & emb, const at::Tensor & h, const char * proj) {
        auto v = w.get(table).unsqueeze(0).unsqueeze(0) + emb.unsqueeze(2);  // [B, T, 2, D]
        auto shift = v.select(2, 0), scale = v.select(2, 1);
        auto n = at::layer_norm(h, {h.size(-1)}, {}, {}, 1e-6);
        const auto x = n * (1 + scale) + shift;
        return hooked(hook, proj, [&] { return linear(w, proj, x); });
    };
    return {out("scale_shift_table", s.embedded_timestep, s.x, "proj_out"),
            out("audio_scale_shift_table", s.audio_embedded_timestep, s.a, "audio_proj_out")};
}

std::vector<std::string> diffusers_module_names(const TransformerConfig & c) {
    std::vector<std::string> n = {"", "proj_in", "audio_proj_in"};
    if (c.use_prompt_embeddings)
        for (const char * p : {"caption_projection", "audio_caption_projection"})
            for (const char * m : {"", ".linear_1", ".act_1", ".linear_2"}) n.push_back(std::string(p) + m);
    auto adaln = [&](const std::string & p) {
        for (const char * m : {"", ".emb", ".emb.time_proj", ".emb.timestep_embedder", ".emb.timestep_embedder.linear_1",
                               ".emb.timestep_embedder.act", ".emb.timestep_embedder.linear_2", ".silu", ".linear"})
            n.push_back(p + m);
    };
    for (const char * p : {"time_embed", "audio_time_embed", "av_cross_attn_video_scale_shift",
                           "av_cross_attn_audio_scale_shift", "av_cross_attn_video_a2v_gate",
                           "av_cross_attn_audio_v2a_gate"})
        adaln(p);
    if (c.prompt_adaln()) {
        adaln("prompt_adaln");
        adaln("audio_prompt_adaln");
    }
    for (const char * m : {"rope", "audio_rope", "cross_attn_rope", "cross_attn_audio_rope", "transformer_blocks"})
        n.push_back(m);
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = dit_block_prefix(i);
        n.push_back(b);
        auto attention = [&](const char * norm, const char * attn, bool gated) {
            n.push_back(b + "." + norm);
            for (const char * m : {"", ".norm_q", ".norm_k", ".to_q", ".to_k", ".to_v", ".to_out", ".to_out.0",
                                   ".to_out.1"})
                n.push_back(b + "." + attn + m);
            if (gated) n.push_back(b + "." + attn + ".to_gate_logits");
        };
        attention("norm1", "attn1", c.gated_attn);
        attention("audio_norm1", "audio_attn1", c.audio_gated_attn);
        attention("norm2", "attn2", c.gated_attn);
        attention("audio_norm2", "audio_attn2", c.audio_gated_attn);
        attention("audio_to_video_norm", "audio_to_video_attn", c.gated_attn);
        attention("video_to_audio_norm", "video_to_audio_attn", c.audio_gated_attn);
        for (const char * ff : {"ff", "audio_ff"}) {
            n.push_back(b + (std::string(ff) == "ff" ? ".norm3" : ".audio_norm3"));
            for (const char * m : {"", ".net", ".net.0", ".net.0.proj", ".net.1", ".net.2"}) n.push_back(b + "." + ff + m);
        }
    }
    for (const char * m : {"norm_out", "proj_out", "audio_norm_out", "audio_proj_out"}) n.push_back(m);
    return n;
}

std::vector<std::string> hookable_module_names(const TransformerConfig & c) {
    std::vector<std::string> n;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = dit_block_prefix(i);
        n.push_back(b);
        for (const char * m : {"attn1", "audio_attn1", "attn2", "audio_attn2", "audio_to_video_attn",
                               "video_to_audio_attn", "ff", "audio_ff"})
            n.push_back(b + "." + m);
    }
    n.push_back("proj_out");
    n.push_back("audio_proj_out");
    return n;
}

std::pair<at::Tensor, at::Tensor> forward(const TransformerConfig & c, Weights & w, const TransformerInputs & in,
                                          model::StepCache * cache, const std::string & branch, int step) {
    auto s = prepare(c, w, in);
    // taylorseer (Note [Step caching]): the hooked submodules by their diffusers names, in this guidance branch.
    const bool modules = cache && cache->settings().kind == model::StepCacheKind::taylorseer;
    auto module_hook = [&](std::string prefix) -> ModuleHook {
        if (!modules) return {};
        return [cache, &branch, prefix = std::move(prefix)](const char * m, const std::function<at::Tensor()> & compute) {
            return cache->module(branch, prefix + m, [&] { return model::Outputs{compute()}; }).outputs.front();
        };
    };
    if (cache) {
        // The block is dual-stream: (video, audio) in and out; the video stream is the hooks' hidden_states (the
        // signal), the audio stream their second returned stream (Note [Step caching], LTX-2).
        auto out = cache->run(
            branch, step, {s.x, s.a}, c.num_layers,
            [&](int64_t i, const model::Streams & x) {
                s.x = x.at(0);
                s.a = x.at(1);
                run_block(c, w, i, s, module_hook(dit_block_prefix(i) + "."));
                return model::Streams{s.x, s.a};
            },
            [&](int64_t i) { return w.skip(dit_block_prefix(i)); });
        s.x = out.at(0);
        s.a = out.at(1);
    } else {
        for (int64_t i = 0; i < c.num_layers; ++i) run_block(c, w, i, s);
    }
    return finish(c, w, s, module_hook(""));
}

}  // namespace ddo::ltx2
