#include "transformer.hpp"

#include <cmath>
#include <set>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

constexpr int64_t kTokensPerSlot = 4;  // one VLM image slot = 2x2 latent tokens

at::Tensor proj(const at::Tensor & x, const model::Linear & w) { return w(x); }

// diffusers RMSNorm (normalization.py), elementwise affine, no bias.
at::Tensor rms_norm(const at::Tensor & x, const at::Tensor & w, double eps) {
    auto var = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
    auto y = x * at::rsqrt(var + eps);
    if (w.scalar_type() == at::kHalf || w.scalar_type() == at::kBFloat16) y = y.to(w.scalar_type());
    return y * w;
}

// QwenImage21ZeroCenterRMSNorm: fp32, scale = weight + 1.
at::Tensor zero_center_rms_norm(const at::Tensor & x, const at::Tensor & w, double eps) {
    auto h = x.to(at::kFloat);
    auto rrms = at::rsqrt(h.pow(2).mean(-1, true) + eps);
    return (h * rrms * (w.to(at::kFloat) + 1)).to(x.scalar_type());
}

at::Tensor layer_norm(const at::Tensor & x, double eps) { return at::layer_norm(x, {x.size(-1)}, {}, {}, eps); }

// _select_modulation_rows
at::Tensor select_rows(const at::Tensor & params, const std::optional<at::Tensor> & mask) {
    if (!mask) return params.unsqueeze(1);
    auto n = params.size(0);
    auto real = params.slice(0, 0, n - 1).unsqueeze(1);
    auto zero = params.slice(0, n - 1, n).unsqueeze(0);
    return at::where(mask->view({1, -1, 1}), real, zero);
}

at::Tensor apply_rope(const at::Tensor & x, const at::Tensor & freqs) {
    auto shape = x.sizes().vec();
    auto xf = x.to(at::kFloat).reshape({shape[0], shape[1], shape[2], -1, 2});
    auto xc = at::view_as_complex(xf);
    auto out = at::view_as_real(xc * freqs.unsqueeze(1)).flatten(3);
    return out.to(x.scalar_type());
}

at::Tensor sdpa(const at::Tensor & q, const at::Tensor & k, const at::Tensor & v, const std::optional<at::Tensor> & m) {
    // dispatch_attention_fn (native): [B, S, H, D] -> [B, H, S, D] -> SDPA -> back.
    auto out = at::scaled_dot_product_attention(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}),
                                                v.permute({0, 2, 1, 3}), m, 0.0, false);
    return out.permute({0, 2, 1, 3});
}

// rope_params for positions 0..8191 then -1024..-1, as QwenImage21Rope builds them.
at::Tensor rope_axis_table(int64_t dim, double theta) {
    auto pos = at::arange(8192, at::kLong);
    auto neg = at::arange(1024, at::kLong).flip(0) * -1 - 1;
    auto index = at::cat({pos, neg});
    auto inv = at::reciprocal(at::pow(at::Scalar(theta), at::arange(0, dim, 2, at::kLong).to(at::kFloat).div(dim)));
    auto freqs = at::outer(index, inv);
    return at::polar(at::ones_like(freqs), freqs);
}

at::Tensor gather_rows(const at::Tensor & table, const std::vector<int64_t> & idx) {
    std::vector<int64_t> wrapped(idx.size());
    const int64_t n = table.size(0);
    for (size_t i = 0; i < idx.size(); ++i) {
        if (idx[i] < -1024 || idx[i] >= 8192)
            throw RuntimeError("qwen_image_21: RoPE position " + std::to_string(idx[i]) +
                               " is outside the table (-1024..8191); the image or prompt is too large");
        wrapped[i] = idx[i] < 0 ? n + idx[i] : idx[i];
    }
    return table.index_select(0, at::tensor(wrapped, at::kLong));
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> global_tensor_specs(const TransformerConfig & c) {
    const int64_t D = c.inner_dim();
    return {
        {"img_in.weight", {D, c.in_channels * c.patch_size * c.patch_size}},
        {"txt_in.text_norm.weight", {c.context_in_dim}},
        {"txt_in.in_layer.weight", {D, c.context_in_dim}},
        {"txt_in.out_layer.weight", {D, D}},
        {"time_text_embed.timestep_embedder.linear_1.weight", {D, 256}},
        {"time_text_embed.timestep_embedder.linear_2.weight", {D, D}},
        {"modulation.1.weight", {4 * D, D}},
        {"norm_out.linear.weight", {D, D}},
        {"proj_out.weight", {c.patch_size * c.patch_size * c.out_channels, D}},
    };
}

std::vector<std::pair<std::string, std::vector<int64_t>>> block_tensor_specs(const TransformerConfig & c, int64_t i) {
    const int64_t D = c.inner_dim(), H = D * c.mlp_ratio, hd = c.attention_head_dim;
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    return {
        {p + "attn.to_q.weight", {D, D}},          {p + "attn.to_k.weight", {D, D}},
        {p + "attn.to_v.weight", {D, D}},          {p + "attn.to_out.0.weight", {D, D}},
        {p + "attn.norm_q.weight", {hd}},          {p + "attn.norm_k.weight", {hd}},
        {p + "img_mlp.proj.weight", {H, D}},       {p + "img_mlp.gate_layer.weight", {H, D}},
        {p + "img_mlp.out.weight", {D, H}},
    };
}

void validate_transformer_checkpoint(const TensorFile & f, const TransformerConfig & c) {
    auto specs = global_tensor_specs(c);
    for (int64_t i = 0; i < c.num_layers; ++i)
        for (auto & spec : block_tensor_specs(c, i)) specs.push_back(std::move(spec));
    std::vector<std::string> names;
    for (const auto & [n, s] : specs) names.push_back(n);
    // A file given with --transformer: another model's tensors are named before any is found missing.
    f.require_known(names, "Qwen-Image 2.1 transformer (num_layers " + std::to_string(c.num_layers) + ")");
    for (const auto & [name, shape] : specs) {
        if (!f.contains(name))
            throw RuntimeError(f.origin().string() + ": tensor '" + name + "' is missing from the transformer checkpoint (" +
                               f.describe_files() + "); re-export it with diffusers save_pretrained");
        if (!at::isFloatingType(f.dtype_of(name)) || at::IntArrayRef(f.shape_of(name)) != at::IntArrayRef(shape))
            f.weight(name, shape, at::kFloat);  // throws the detailed message (dtype or shape)
    }
    const std::set<std::string> expected(names.begin(), names.end());
    for (const auto & n : f.names())
        if (!expected.count(n))
            throw RuntimeError(f.file_of(n).string() + ": unexpected tensor '" + n +
                               "': the transformer config.json (num_layers " + std::to_string(c.num_layers) +
                               ") contradicts the weights");
}

TransformerGlobals load_transformer_globals(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                            model::ComponentLora * lora, c10::Device device) {
    auto s = global_tensor_specs(c);
    auto get = [&](size_t i) { return f.weight(s[i].first, s[i].second, dt).to(device); };
    auto lin = [&](size_t i) {
        auto w = get(i);
        const auto * d = lora ? lora->attach(s[i].first, w) : nullptr;
        return model::Linear{std::move(w), std::nullopt, d};
    };
    return {lin(0), get(1), lin(2), lin(3), lin(4), lin(5), lin(6), lin(7), lin(8)};
}

TransformerBlockWeights block_weights_from(const std::function<at::Tensor(const std::string &)> & get,
                                           const TransformerConfig & c, int64_t i, const LoraLookup & lora) {
    auto s = block_tensor_specs(c, i);
    auto lin = [&](size_t k) {
        return model::Linear{get(s[k].first), std::nullopt, lora ? lora(s[k].first) : nullptr};
    };
    return {lin(0), lin(1), lin(2), lin(3), get(s[4].first), get(s[5].first), lin(6), lin(7), lin(8)};
}

TransformerBlockWeights load_transformer_block(const TensorFile & f, const TransformerConfig & c, int64_t i,
                                               at::ScalarType dt) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (auto & [n, s] : block_tensor_specs(c, i)) shapes[n] = s;
    return block_weights_from([&](const std::string & n) { return f.weight(n, shapes.at(n), dt); }, c, i);
}

at::Tensor rope_table(const TransformerConfig & c, const std::vector<ImageShape> & img_shapes,
                      const at::Tensor & image_pad_mask) {
    const auto mask = image_pad_mask.to(at::kBool).contiguous();
    const int64_t total = mask.size(0);
    const bool * m = mask.data_ptr<bool>();
    std::vector<int64_t> frame, hidx, widx;
    frame.reserve(total);
    int64_t cursor = 0, position = 0;
    for (const auto & shp : img_shapes) {
        const int64_t height = shp[1], width = shp[2];
        int64_t block_start = cursor;
        while (block_start < total && !m[block_start]) ++block_start;
        if (block_start >= total) throw RuntimeError("qwen_image_21: img_shapes lists more images than the image mask");
        const int64_t text_len = block_start - cursor;
        for (int64_t i = 0; i < text_len; ++i) frame.push_back(position + i);
        position += text_len;
        cursor = block_start + height * width;
        for (int64_t i = 0; i < height * width; ++i) frame.push_back(position);
        position += std::max(height, width);
        for (int64_t h = -(height - height / 2); h < height / 2; ++h)
            for (int64_t w = 0; w < width; ++w) hidx.push_back(h);
        for (int64_t h = 0; h < height; ++h)
            for (int64_t w = -(width - width / 2); w < width / 2; ++w) widx.push_back(w);
    }
    for (int64_t i = 0; cursor + i < total; ++i) frame.push_back(position + i);
    if (int64_t(frame.size()) != total) throw RuntimeError("qwen_image_21: img_shapes do not match the image mask");
    std::vector<int64_t> hh = frame, ww = frame;
    size_t k = 0;
    for (int64_t i = 0; i < total; ++i)
        if (m[i]) {
            hh[i] = hidx[k];
            ww[i] = widx[k];
            ++k;
        }
    std::vector<at::Tensor> parts;
    const std::vector<int64_t> * idx[3] = {&frame, &hh, &ww};
    for (int a = 0; a < 3; ++a) parts.push_back(gather_rows(rope_axis_table(c.axes_dims_rope[a], 10000.0), *idx[a]));
    return at::cat(parts, -1);
}

namespace {

// build_token_metadata's image ids: for each joint-sequence token, the index of the image (img_shapes entry) it
// belongs to, -1 for text.
std::vector<int64_t> image_ids_of(const at::Tensor & image_positions, const std::vector<ImageShape> & img_shapes,
                                  int64_t S) {
    std::vector<int64_t> ids(size_t(S), -1);
    auto pos = image_positions.contiguous();
    const int64_t * p = pos.data_ptr<int64_t>();
    int64_t k = 0;
    for (size_t b = 0; b < img_shapes.size(); ++b) {
        const int64_t len = img_shapes[b][0] * img_shapes[b][1] * img_shapes[b][2];
        for (int64_t i = 0; i < len; ++i) ids[size_t(p[k++])] = int64_t(b);
    }
    return ids;
}

// QwenImage21TemporalTimesteps (cos first) + TimestepEmbedding without biases.
at::Tensor timestep_embedding(const at::Tensor & timestep, const model::Linear & linear_1, const model::Linear & linear_2,
                              at::ScalarType dt) {
    const int64_t half = 128;
    auto freqs = at::exp(at::arange(0, half, at::kFloat) * (-std::log(10000.0)) / half);
    auto targs = (timestep.to(at::kFloat) * 1000.0).unsqueeze(1) * freqs.unsqueeze(0);
    auto tproj = at::cat({at::cos(targs), at::sin(targs)}, -1).to(dt);
    return proj(at::silu(proj(tproj, linear_1)), linear_2);
}

// [B, S] keys attended to: every image token, and the text tokens the prompt mask keeps (its rows are the VLM
// sequence's text slots, in order).
at::Tensor key_valid_mask(const at::Tensor & text_mask, const at::Tensor & img_mask0, const at::Tensor & image_pad_mask) {
    auto kv = at::ones({text_mask.size(0), image_pad_mask.size(0)}, at::kBool);
    auto text_positions = (~image_pad_mask).nonzero().squeeze(1);
    auto vlm_text = (~img_mask0.slice(0, 0, text_mask.size(1))).nonzero().squeeze(1);
    kv.index_copy_(1, text_positions, text_mask.to(at::kBool).index_select(1, vlm_text));
    return kv;
}

}  // namespace

Transformer::Transformer(TransformerConfig config, TransformerGlobals globals)
    : config_(std::move(config)), g_(std::move(globals)) {}

TransformerState Transformer::prepare(const TransformerInputs & in, KvMode mode) const {
    const auto & c = config_;
    if (mode != KvMode::off && !c.causal_condition)
        throw UsageError("qwen_image_21: the KV cache needs causal_condition=true in transformer/config.json");
    const auto dt = g_.img_in.weight.scalar_type();
    const int64_t B = in.hidden_states.size(0);
    auto hidden = proj(in.hidden_states.to(dt), g_.img_in);
    auto text = in.encoder_hidden_states.to(dt);
    text = zero_center_rms_norm(text, g_.txt_norm, c.eps);
    text = proj(at::gelu(proj(text, g_.txt_in_layer), "tanh"), g_.txt_out_layer);

    auto img_mask0 = in.img_mask.select(0, 0).to(at::kBool);
    auto repeats = at::where(img_mask0, at::scalar_tensor(kTokensPerSlot, at::kLong), at::scalar_tensor(1, at::kLong));
    auto image_pad_mask = at::repeat_interleave(img_mask0, repeats);
    const auto & tgt = in.img_shapes.back();
    const int64_t target_tokens = tgt[0] * tgt[1] * tgt[2];
    auto joint = at::cat({text, at::zeros({B, target_tokens / 4, text.size(2)}, text.options())}, 1);
    joint = joint.repeat_interleave(repeats, 1);
    auto image_positions = image_pad_mask.nonzero().squeeze(1);
    if (image_positions.size(0) != hidden.size(1))
        throw UsageError("qwen_image_21: the image mask marks " + std::to_string(image_positions.size(0)) +
                         " latent tokens but hidden_states holds " + std::to_string(hidden.size(1)));
    joint = joint.index_copy(1, image_positions, hidden);

    auto rotary = rope_table(c, in.img_shapes, image_pad_mask);

    // build_token_metadata: image ids per block and the target-token mask.
    const int64_t S = image_pad_mask.size(0);
    const auto image_ids = image_ids_of(image_positions, in.img_shapes, S);
    auto target_mask = at::zeros({S}, at::kBool);
    target_mask.index_fill_(0, image_positions.slice(0, image_positions.size(0) - target_tokens), true);

    auto timestep = in.timestep.to(dt);
    std::optional<at::Tensor> mod_mask;
    if (c.causal_condition) {
        timestep = at::cat({timestep, at::zeros({1}, timestep.options())});
        mod_mask = target_mask;
    }
    auto temb = timestep_embedding(timestep, g_.time_linear_1, g_.time_linear_2, dt);
    auto modulation = proj(at::silu(temb), g_.modulation);

    std::optional<at::Tensor> key_valid;
    if (in.text_mask) key_valid = key_valid_mask(*in.text_mask, img_mask0, image_pad_mask);
    const int64_t prefix_len = S - target_tokens;

    TransformerState st;
    st.temb = temb;
    st.ctx.modulation = modulation;
    st.ctx.key_valid = key_valid;
    st.ctx.prefix_len = prefix_len;
    st.ctx.kv_mode = mode;
    if (mode == KvMode::cached) {
        st.x = joint.slice(1, prefix_len);
        st.ctx.rotary = rotary.slice(0, prefix_len);
        st.ctx.mod_mask = mod_mask->slice(0, prefix_len);
    } else {
        st.x = joint;
        st.ctx.rotary = rotary;
        st.ctx.mod_mask = mod_mask;
        int64_t start = 0;
        for (int64_t i = 1; i <= prefix_len; ++i)
            if (i == prefix_len || image_ids[i] != image_ids[start]) {
                st.ctx.segments.push_back({start, i, image_ids[start] < 0});
                start = i;
            }
    }
    return st;
}

at::Tensor run_block(const TransformerConfig & c, const TransformerBlockWeights & w, const at::Tensor & x,
                     const BlockContext & ctx, KvLayerCache * cache, const ModuleHook & hook) {
    const double eps = c.eps;
    const int64_t D = c.inner_dim();
    auto mod1 = ctx.modulation.slice(-1, 0, 2 * D), mod2 = ctx.modulation.slice(-1, 2 * D, 4 * D);
    auto scale1 = select_rows(mod1.slice(-1, 0, D), ctx.mod_mask);
    auto gate1 = select_rows(mod1.slice(-1, D, 2 * D), ctx.mod_mask);
    auto scale2 = select_rows(mod2.slice(-1, 0, D), ctx.mod_mask);
    auto gate2 = select_rows(mod2.slice(-1, D, 2 * D), ctx.mod_mask);

    auto h = layer_norm(x, eps) * (1 + scale1);
    // QwenImage21Attention (the module "attn"): modulated input to to_out.
    auto attention = [&]() -> at::Tensor {
        const int64_t hd = c.attention_head_dim;
        auto q = proj(h, w.to_q).unflatten(-1, {-1, hd});
        auto k = proj(h, w.to_k).unflatten(-1, {-1, hd});
        auto v = proj(h, w.to_v).unflatten(-1, {-1, hd});
        q = rms_norm(q, w.norm_q, eps).to(v.scalar_type());
        k = rms_norm(k, w.norm_k, eps).to(v.scalar_type());
        q = apply_rope(q, ctx.rotary);
        k = apply_rope(k, ctx.rotary);
        if (cache && ctx.kv_mode == KvMode::extract) {
            cache->k = k.slice(1, 0, ctx.prefix_len).clone();
            cache->v = v.slice(1, 0, ctx.prefix_len).clone();
        } else if (cache && ctx.kv_mode == KvMode::cached) {
            if (!cache->k.defined()) throw RuntimeError("qwen_image_21: KV cache used before it was extracted");
            k = at::cat({cache->k, k}, 1);
            v = at::cat({cache->v, v}, 1);
        }
        const int64_t sq = q.size(1);
        at::Tensor attn;
        if (ctx.kv_mode == KvMode::cached) {
            std::optional<at::Tensor> m;
            if (ctx.key_valid) m = ctx.key_valid->unsqueeze(1).unsqueeze(1);
            attn = sdpa(q, k, v, m);
        } else {
            std::vector<at::Tensor> outs;
            for (const auto & seg : ctx.segments) {
                std::optional<at::Tensor> m;
                if (seg.is_text) {
                    const int64_t n = seg.end - seg.start;
                    m = at::cat({at::ones({n, seg.start}, at::kBool), at::ones({n, n}, at::kBool).tril()}, 1)
                            .unsqueeze(0)
                            .unsqueeze(0);
                }
                if (ctx.key_valid) {
                    auto kv = ctx.key_valid->slice(1, 0, seg.end).unsqueeze(1).unsqueeze(1);
                    m = m ? (*m & kv) : kv;
                }
                outs.push_back(sdpa(q.slice(1, seg.start, seg.end), k.slice(1, 0, seg.end), v.slice(1, 0, seg.end), m));
            }
            std::optional<at::Tensor> m;
            if (ctx.key_valid) m = ctx.key_valid->unsqueeze(1).unsqueeze(1);
            outs.push_back(sdpa(q.slice(1, ctx.prefix_len), k, v, m));
            attn = at::cat(outs, 1);
        }
        attn = attn.slice(1, 0, sq).flatten(2, 3).to(q.scalar_type());
        return proj(attn, w.to_out);
    };
    const at::Tensor attn = hook ? hook("attn", attention) : attention();
    auto out = x + at::tanh(gate1) * attn;
    auto h2 = layer_norm(out, eps) * (1 + scale2);
    auto feed_forward = [&] { return proj(at::silu(proj(h2, w.mlp_gate)) * proj(h2, w.mlp_proj), w.mlp_out); };
    const at::Tensor mlp = hook ? hook("img_mlp", feed_forward) : feed_forward();  // QwenImage21SwiGLUFeedForward
    out = out + at::tanh(gate2) * mlp;
    if (out.scalar_type() == at::kHalf) out = out.clip(-65504, 65504);
    return out;
}

at::Tensor Transformer::finish(const TransformerState & s,
                               const std::function<at::Tensor(const std::function<at::Tensor()> &)> & proj_out_hook) const {
    auto scale = select_rows(proj(at::silu(s.temb).to(s.x.scalar_type()), g_.norm_out), s.ctx.mod_mask);
    auto x = layer_norm(s.x, config_.eps) * (1 + scale);
    auto projection = [&] { return proj(x, g_.proj_out); };
    return proj_out_hook ? proj_out_hook(projection) : projection();
}

std::vector<std::string> diffusers_module_names(const TransformerConfig & c) {
    std::vector<std::string> n = {"", "pos_embed", "time_text_embed", "time_text_embed.time_proj",
                                  "time_text_embed.timestep_embedder", "time_text_embed.timestep_embedder.linear_1",
                                  "time_text_embed.timestep_embedder.act", "time_text_embed.timestep_embedder.linear_2",
                                  "txt_in", "txt_in.text_norm", "txt_in.in_layer", "txt_in.act", "txt_in.out_layer",
                                  "img_in", "modulation", "modulation.0", "modulation.1", "transformer_blocks"};
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = "transformer_blocks." + std::to_string(i);
        for (const char * m : {"", ".img_norm1", ".attn", ".attn.to_q", ".attn.to_k", ".attn.to_v", ".attn.to_out",
                               ".attn.to_out.0", ".attn.to_out.1", ".attn.norm_q", ".attn.norm_k", ".img_norm2",
                               ".img_mlp", ".img_mlp.proj", ".img_mlp.out", ".img_mlp.gate_layer",
                               ".img_mlp.activation_fn"})
            n.push_back(b + m);
    }
    for (const char * m : {"norm_out", "norm_out.silu", "norm_out.linear", "norm_out.norm", "proj_out"}) n.push_back(m);
    return n;
}

std::vector<std::string> hookable_module_names(const TransformerConfig & c) {
    std::vector<std::string> n;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = "transformer_blocks." + std::to_string(i);
        for (const char * m : {"", ".attn", ".img_mlp"}) n.push_back(b + m);
    }
    n.push_back("proj_out");
    return n;
}

at::Tensor Transformer::forward(const TransformerInputs & in, KvMode mode, const BlockFn & block) const {
    auto st = prepare(in, mode);
    for (int64_t i = 0; i < config_.num_layers; ++i) st.x = block(i, st.x, st.ctx);
    return finish(st);
}

}  // namespace ddo::qwen_image_21
