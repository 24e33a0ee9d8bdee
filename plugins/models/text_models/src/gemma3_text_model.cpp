// The Gemma-3 text tower on ATen (gemma3_text_model.hpp); the reference is transformers'
// models/gemma3/modeling_gemma3.py (Gemma3TextModel) and masking_utils.py (create_causal_mask,
// create_sliding_window_causal_mask).
#include "gemma3_text_model.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "text_tower.hpp"

namespace ddo::text {
namespace {

using nlohmann::json;

[[noreturn]] void bad_config(const std::filesystem::path & f, const std::string & key, const std::string & what) {
    throw UsageError(f.string() + ": " + key + " " + what +
                     "; this is not a Gemma-3 text encoder config ddo can run (expected the config.json that "
                     "transformers' save_pretrained writes for Gemma3ForConditionalGeneration or Gemma3TextModel)");
}

// j.<key> when present and not null, else `fallback` (Gemma3TextConfig's default); named `prefix + key` in errors.
std::int64_t int_or(const json & j, const std::filesystem::path & f, const std::string & prefix, const char * key,
                    std::int64_t fallback) {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    if (!j.at(key).is_number_integer()) bad_config(f, prefix + key, "is not an integer");
    return j.at(key).get<std::int64_t>();
}

double number_or(const json & j, const std::filesystem::path & f, const std::string & prefix, const char * key,
                 double fallback) {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    if (!j.at(key).is_number()) bad_config(f, prefix + key, "is not a number");
    return j.at(key).get<double>();
}

// One rope_parameters entry (or 4.x rope_scaling) over `rope`, which holds the theta already chosen.
void read_rope(const json & r, const std::filesystem::path & f, const std::string & key, Gemma3TextConfig::Rope & rope) {
    const std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default" && type != "linear")
        bad_config(f, key + ".rope_type", "is \"" + type + "\" (only default and linear RoPE are implemented)");
    if (r.contains("rope_theta") && !r.at("rope_theta").is_null()) rope.theta = r.at("rope_theta").get<double>();
    rope.linear_factor = type == "linear" ? number_or(r, f, key + ".", "factor", 1.0) : 1.0;
    if (type == "linear" && !(rope.linear_factor > 0)) bad_config(f, key + ".factor", "must be positive");
    if (number_or(r, f, key + ".", "partial_rotary_factor", 1.0) != 1.0)
        bad_config(f, key + ".partial_rotary_factor", "is not 1 (partial RoPE is not implemented)");
}

// Gemma3RMSNorm: float32 statistics, times (1 + weight) in float32, back to the input dtype.
at::Tensor rms_norm(const at::Tensor & x, const at::Tensor & w, double eps) {
    auto h = x.to(at::kFloat);
    h = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
    return (h * (1.0 + w.to(at::kFloat))).to(x.scalar_type());
}

using tower::linear;

const char * const kNorms[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                               "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"};

// Every tensor of layer i with its shape.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> layer_tensors(const Gemma3TextConfig & c, std::int64_t i) {
    const std::string p = c.weight_prefix + "layers." + std::to_string(i) + ".";
    const std::int64_t H = c.hidden_size, Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> t;
    for (const char * n : kNorms) t.push_back({p + n, {H}});
    t.push_back({p + "self_attn.q_proj.weight", {Q, H}});
    t.push_back({p + "self_attn.k_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.v_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.o_proj.weight", {H, Q}});
    if (c.attention_bias) {
        t.push_back({p + "self_attn.q_proj.bias", {Q}});
        t.push_back({p + "self_attn.k_proj.bias", {KV}});
        t.push_back({p + "self_attn.v_proj.bias", {KV}});
        t.push_back({p + "self_attn.o_proj.bias", {H}});
    }
    t.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    t.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    t.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, H}});
    t.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, H}});
    t.push_back({p + "mlp.down_proj.weight", {H, c.intermediate_size}});
    return t;
}

// RoPE of one layer type: inv_freq in float32 as the reference (linear: divided by the factor), angles
// pos * inv_freq, cos/sin duplicated over the two halves, cast to the activation dtype. [1, 1, L, D].
std::pair<at::Tensor, at::Tensor> rope_tables(const Gemma3TextConfig::Rope & r, std::int64_t D, std::int64_t L,
                                              at::ScalarType dtype, at::Device device) {
    const auto expo = at::arange(0, D, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / double(D);
    auto inv_freq = 1.0 / at::pow(at::Scalar(r.theta), expo);
    if (r.linear_factor != 1.0) inv_freq = inv_freq / r.linear_factor;
    const auto pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device)).to(at::kFloat);
    const auto freqs = pos.unsqueeze(-1) * inv_freq.to(device);  // [L, D/2]
    const auto emb = at::cat({freqs, freqs}, -1).view({1, 1, L, D});
    return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

}  // namespace

Gemma3TextConfig Gemma3TextConfig::from_file(const std::filesystem::path & f) {
    const json root = tower::read_config_json(f);
    // Gemma3ForConditionalGeneration nests the language model under text_config; a plain Gemma3TextConfig does not.
    const bool nested = root.contains("text_config") && root.at("text_config").is_object();
    const json & j = nested ? root.at("text_config") : root;
    const std::string k = nested ? "text_config." : "";
    Gemma3TextConfig c;
    c.vocab_size = int_or(j, f, k, "vocab_size", c.vocab_size);
    c.hidden_size = int_or(j, f, k, "hidden_size", c.hidden_size);
    c.intermediate_size = int_or(j, f, k, "intermediate_size", c.intermediate_size);
    c.num_layers = int_or(j, f, k, "num_hidden_layers", c.num_layers);
    c.num_heads = int_or(j, f, k, "num_attention_heads", c.num_heads);
    c.num_kv_heads = int_or(j, f, k, "num_key_value_heads", c.num_kv_heads);
    c.head_dim = int_or(j, f, k, "head_dim", c.head_dim);
    c.rms_norm_eps = number_or(j, f, k, "rms_norm_eps", c.rms_norm_eps);
    c.query_pre_attn_scalar = number_or(j, f, k, "query_pre_attn_scalar", c.query_pre_attn_scalar);
    c.sliding_window = int_or(j, f, k, "sliding_window", c.sliding_window);
    if (j.contains("attention_bias")) c.attention_bias = j.at("attention_bias").get<bool>();
    for (auto * v : {&c.vocab_size, &c.hidden_size, &c.intermediate_size, &c.num_layers, &c.num_heads, &c.head_dim})
        if (*v <= 0) bad_config(f, k + "hidden_size / heads / layers", "must be positive");
    if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
        bad_config(f, k + "num_key_value_heads", "must divide num_attention_heads");
    if (c.head_dim % 2 != 0) bad_config(f, k + "head_dim", "must be even for RoPE");
    if (!(c.query_pre_attn_scalar > 0)) bad_config(f, k + "query_pre_attn_scalar", "must be positive");
    const std::string act = j.value("hidden_activation", j.value("hidden_act", std::string("gelu_pytorch_tanh")));
    if (act != "gelu_pytorch_tanh")
        bad_config(f, k + "hidden_activation", "is \"" + act + "\" (only gelu_pytorch_tanh is implemented)");
    if (j.contains("attn_logit_softcapping") && !j.at("attn_logit_softcapping").is_null())
        bad_config(f, k + "attn_logit_softcapping", "is set (attention logit soft-capping is not implemented)");
    if (j.value("use_bidirectional_attention", false))
        bad_config(f, k + "use_bidirectional_attention", "is true (only causal attention is implemented)");

    // Layer types: transformers >= 4.53 writes layer_types; older configs a sliding_window_pattern (every
    // pattern-th layer global), default 6.
    if (j.contains("layer_types") && j.at("layer_types").is_array()) {
        const auto & lt = j.at("layer_types");
        if (std::int64_t(lt.size()) != c.num_layers)
            bad_config(f, k + "layer_types", "has " + std::to_string(lt.size()) + " entries for " +
                                                 std::to_string(c.num_layers) + " layers");
        for (std::size_t i = 0; i < lt.size(); ++i) {
            const std::string t = lt[i].get<std::string>();
            if (t != "sliding_attention" && t != "full_attention")
                bad_config(f, k + "layer_types[" + std::to_string(i) + "]",
                           "is \"" + t + "\" (sliding_attention or full_attention)");
            c.sliding.push_back(t == "sliding_attention");
        }
    } else {
        const std::int64_t pattern = int_or(j, f, k, "sliding_window_pattern", int_or(j, f, k, "_sliding_window_pattern", 6));
        if (pattern <= 0) bad_config(f, k + "sliding_window_pattern", "must be positive");
        for (std::int64_t i = 0; i < c.num_layers; ++i) c.sliding.push_back((i + 1) % pattern != 0);
    }
    for (bool s : c.sliding)
        if (s && c.sliding_window <= 0) bad_config(f, k + "sliding_window", "must be positive for sliding layers");

    // RoPE: transformers 5 writes rope_parameters {full_attention: {...}, sliding_attention: {...}}; 4.x wrote
    // rope_theta (global), rope_local_base_freq (local) and rope_scaling (the global layers').
    c.full_rope.theta = number_or(j, f, k, "rope_theta", 1e6);
    c.sliding_rope.theta = number_or(j, f, k, "rope_local_base_freq", 1e4);
    const json * rp = j.contains("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters") : nullptr;
    if (rp && (rp->contains("full_attention") || rp->contains("sliding_attention"))) {
        if (rp->contains("full_attention") && rp->at("full_attention").is_object())
            read_rope(rp->at("full_attention"), f, k + "rope_parameters.full_attention", c.full_rope);
        if (rp->contains("sliding_attention") && rp->at("sliding_attention").is_object())
            read_rope(rp->at("sliding_attention"), f, k + "rope_parameters.sliding_attention", c.sliding_rope);
    } else if (rp) {
        read_rope(*rp, f, k + "rope_parameters", c.full_rope);
    } else if (j.contains("rope_scaling") && j.at("rope_scaling").is_object()) {
        read_rope(j.at("rope_scaling"), f, k + "rope_scaling", c.full_rope);
    }
    return c;
}

std::vector<model::GroupSpec> gemma3_groups(Gemma3TextConfig & c, const std::vector<std::string> & names) {
    // The language model's prefix: transformers 5 saves Gemma3ForConditionalGeneration as language_model.model.*,
    // 4.5x as model.language_model.*, Gemma3ForCausalLM as model.*, a bare Gemma3TextModel none.
    static const char * const kPrefixes[] = {"language_model.model.", "model.language_model.", "model.", ""};
    c.weight_prefix = tower::find_weight_prefix(names, kPrefixes, "a Gemma-3 text encoder");
    std::vector<model::GroupSpec> groups;
    groups.push_back({"embed_tokens", {c.weight_prefix + "embed_tokens.weight"}});
    for (std::int64_t i = 0; i < c.num_layers; ++i) {
        model::GroupSpec g{"layers." + std::to_string(i), {}};
        for (auto & [name, shape] : layer_tensors(c, i)) g.tensors.push_back(name);
        groups.push_back(std::move(g));
    }
    groups.push_back({"norm", {c.weight_prefix + "norm.weight"}});
    return groups;
}

void gemma3_check_weights(const model::TensorFile & f, const Gemma3TextConfig & c) {
    f.check(c.weight_prefix + "embed_tokens.weight", {c.vocab_size, c.hidden_size});
    for (std::int64_t i = 0; i < c.num_layers; ++i)
        for (const auto & [name, shape] : layer_tensors(c, i)) f.check(name, shape);
    f.check(c.weight_prefix + "norm.weight", {c.hidden_size});
}

namespace {

// Masks [B, 1, L, L] (true = attend): causal and key padding; sliding layers also j > i - window. Without padding
// the full layers run plain causal SDPA (is_causal), as transformers skips the mask; so do the sliding ones while
// the window covers the whole prompt.
struct Masked {
    std::optional<at::Tensor> allowed;  // none: is_causal
    std::optional<at::Tensor> row_ok;   // queries that see a key, as dtype (rows without one give 0)
};
struct LayerMasks {
    Masked full, sliding;
};

LayerMasks layer_masks(const Gemma3TextConfig & c, const at::Tensor & mask, bool any_full, bool any_sliding,
                       at::ScalarType dtype, at::Device device) {
    const int64_t B = mask.size(0), L = mask.size(1);
    const bool padded = !(mask != 0).all().item<bool>();
    const auto bools = at::TensorOptions().dtype(at::kBool).device(device);
    const auto i_idx = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device)).view({L, 1});
    const auto j_idx = i_idx.view({1, L});
    const auto causal = (j_idx <= i_idx).view({1, 1, L, L});
    const auto keys = (mask != 0).view({B, 1, 1, L});
    const auto eye = at::eye(L, bools).view({1, 1, L, L});
    const auto make_mask = [&](bool sliding) {
        Masked m;
        const bool window = sliding && L > c.sliding_window;
        if (!padded && !window) return m;
        auto allowed = at::logical_and(causal, keys);
        if (window) allowed = at::logical_and(allowed, (j_idx > i_idx - c.sliding_window).view({1, 1, L, L}));
        const auto ok = allowed.any(-1, true);  // [B, 1, L, 1]
        // A row that sees no key would make some SDPA kernels return NaN: let it see itself, then zero it.
        m.allowed = at::logical_or(allowed, at::logical_and(eye, at::logical_not(ok)));
        m.row_ok = ok.to(dtype);
        return m;
    };
    LayerMasks out;
    if (any_full) out.full = make_mask(false);
    if (any_sliding) out.sliding = make_mask(true);
    return out;
}

// One decoder layer (Gemma3DecoderLayer): h [B, L, hidden] -> the layer's output.
at::Tensor decoder_layer(at::Tensor h, const model::GroupTensors & t, const std::string & p, const Gemma3TextConfig & c,
                         const std::pair<at::Tensor, at::Tensor> & rope, const Masked & m, double scale) {
    const int64_t B = h.size(0), L = h.size(1), H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
    auto x = rms_norm(h, t.at(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto q = rms_norm(linear(x, t, p + "self_attn.q_proj", c.attention_bias).view({B, L, H, D}).transpose(1, 2),
                      t.at(p + "self_attn.q_norm.weight"), c.rms_norm_eps);
    auto k = rms_norm(linear(x, t, p + "self_attn.k_proj", c.attention_bias).view({B, L, KV, D}).transpose(1, 2),
                      t.at(p + "self_attn.k_norm.weight"), c.rms_norm_eps);
    auto v = linear(x, t, p + "self_attn.v_proj", c.attention_bias).view({B, L, KV, D}).transpose(1, 2);
    const auto a = tower::attend(q, k, v, rope.first, rope.second, m.allowed, m.row_ok, scale);
    h = h + rms_norm(linear(a, t, p + "self_attn.o_proj", c.attention_bias), t.at(p + "post_attention_layernorm.weight"),
                     c.rms_norm_eps);
    x = rms_norm(h, t.at(p + "pre_feedforward_layernorm.weight"), c.rms_norm_eps);
    auto mlp = linear(at::gelu(linear(x, t, p + "mlp.gate_proj"), "tanh") * linear(x, t, p + "mlp.up_proj"), t,
                      p + "mlp.down_proj");
    return h + rms_norm(mlp, t.at(p + "post_feedforward_layernorm.weight"), c.rms_norm_eps);
}

}  // namespace

std::vector<at::Tensor> gemma3_hidden_states(model::ComponentWeights & weights, const Gemma3TextConfig & c,
                                             const at::Tensor & ids_in, const at::Tensor & mask_in, at::ScalarType dtype,
                                             at::Device device, const Gemma3Callbacks & cb) {
    if (ids_in.dim() != 2 || mask_in.sizes() != ids_in.sizes())
        throw RuntimeError("gemma3 text tower: ids and mask must both be [batch, length]");
    if (weights.size() != std::size_t(c.num_layers + 2))
        throw RuntimeError("gemma3 text tower: the weights hold " + std::to_string(weights.size()) +
                           " execution groups, gemma3_groups gives " + std::to_string(c.num_layers + 2));
    const auto ids = ids_in.to(device, at::kLong);
    const auto mask = mask_in.to(device, at::kLong);
    const int64_t L = ids.size(1), D = c.head_dim;
    if (at::logical_or(ids < 0, ids >= c.vocab_size).any().item<bool>())
        throw RuntimeError("gemma3 text tower: a token id is outside the vocabulary (" + std::to_string(c.vocab_size) +
                           "): the tokenizer and the text encoder's config do not belong together");

    std::vector<at::Tensor> states;
    at::Tensor h = tower::with_group(weights, 0, [&](const model::GroupTensors & t) {
        // Gemma3TextScaledWordEmbedding: the scale sqrt(hidden) is cast to the weight (here: compute) dtype.
        const auto scale = at::scalar_tensor(std::sqrt(double(c.hidden_size)), at::TensorOptions().dtype(at::kFloat))
                               .to(dtype).to(device);
        return at::embedding(t.at(c.weight_prefix + "embed_tokens.weight"), ids).to(dtype) * scale;
    });
    states.push_back(h);

    bool any_sliding = false, any_full = false;
    for (bool s : c.sliding) (s ? any_sliding : any_full) = true;
    std::pair<at::Tensor, at::Tensor> full_rope, sliding_rope;
    if (any_full) full_rope = rope_tables(c.full_rope, D, L, dtype, device);
    if (any_sliding) sliding_rope = rope_tables(c.sliding_rope, D, L, dtype, device);
    const LayerMasks masks = layer_masks(c, mask, any_full, any_sliding, dtype, device);

    const double scale = 1.0 / std::sqrt(c.query_pre_attn_scalar);
    tower::for_each_layer(weights, c.num_layers, c.weight_prefix, cb, [&](const model::GroupTensors & t,
                                                                         const std::string & p, std::int64_t i) {
        const bool sliding = c.sliding[std::size_t(i)];
        h = decoder_layer(h, t, p, c, sliding ? sliding_rope : full_rope, sliding ? masks.sliding : masks.full, scale);
        // hidden_states[i + 1] is layer i's output; the last is replaced by the final norm's output below.
        if (i + 1 < c.num_layers) states.push_back(h);
    });
    states.push_back(tower::with_group(weights, std::size_t(c.num_layers + 1), [&](const model::GroupTensors & t) {
        return rms_norm(h, t.at(c.weight_prefix + "norm.weight"), c.rms_norm_eps);
    }));
    return states;
}

}  // namespace ddo::text
