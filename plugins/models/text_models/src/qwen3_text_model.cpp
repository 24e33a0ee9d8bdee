#include "qwen3_text_model.hpp"

#include <ATen/ATen.h>


#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "text_tower.hpp"

namespace ddo::text {
namespace {

using nlohmann::json;

[[noreturn]] void bad_config(const std::filesystem::path & f, const std::string & key, const std::string & what) {
    throw UsageError(f.string() + ": " + key + " " + what +
                     "; this is not a Qwen3 / Qwen3-VL text encoder config ddo can run (expected the config.json "
                     "that transformers' save_pretrained writes for Qwen3VLForConditionalGeneration)");
}

// j.<key>, named `prefix + key` in errors (text_config.hidden_size).
std::int64_t get_int(const json & j, const std::filesystem::path & f, const std::string & prefix, const std::string & key) {
    if (!j.contains(key) || !j.at(key).is_number_integer()) bad_config(f, prefix + key, "is missing or not an integer");
    return j.at(key).get<std::int64_t>();
}

// transformers' Qwen3VLTextRMSNorm: float32 statistics, back to the input dtype, then the weight.
at::Tensor rms_norm(const at::Tensor & x, const at::Tensor & w, double eps) {
    auto h = x.to(at::kFloat);
    h = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
    return w * h.to(x.scalar_type());
}

using tower::linear;

const char * const kLayerTensors[] = {
    "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};

}  // namespace

Qwen3TextConfig Qwen3TextConfig::from_file(const std::filesystem::path & f) {
    const json root = tower::read_config_json(f);
    // Qwen3VLForConditionalGeneration nests the language model under text_config; a plain Qwen3 model does not.
    const json & j = root.contains("text_config") ? root.at("text_config") : root;
    const std::string k = root.contains("text_config") ? "text_config." : "";
    Qwen3TextConfig c;
    c.vocab_size = get_int(j, f, k, "vocab_size");
    c.hidden_size = get_int(j, f, k, "hidden_size");
    c.intermediate_size = get_int(j, f, k, "intermediate_size");
    c.num_layers = get_int(j, f, k, "num_hidden_layers");
    c.num_heads = get_int(j, f, k, "num_attention_heads");
    c.num_kv_heads = j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null()
                         ? get_int(j, f, k, "num_key_value_heads") : c.num_heads;
    c.head_dim = j.contains("head_dim") && !j.at("head_dim").is_null() ? get_int(j, f, k, "head_dim")
                                                                        : c.hidden_size / c.num_heads;
    if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
        bad_config(f, k + "num_key_value_heads", "must divide num_attention_heads");
    if (j.contains("rms_norm_eps")) c.rms_norm_eps = j.at("rms_norm_eps").get<double>();
    if (j.contains("attention_bias")) c.attention_bias = j.at("attention_bias").get<bool>();
    const std::string act = j.value("hidden_act", "silu");
    if (act != "silu") bad_config(f, k + "hidden_act", "is \"" + act + "\" (only silu is implemented)");
    // transformers 5 writes rope_parameters {rope_type, rope_theta, mrope_section}; 4.x wrote rope_theta beside
    // rope_scaling {rope_type|type, mrope_section}.
    const json * rope = j.contains("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters")
                        : j.contains("rope_scaling") && j.at("rope_scaling").is_object() ? &j.at("rope_scaling")
                                                                                          : nullptr;
    const std::string rope_key = k + (j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling");
    if (rope) {
        const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
        if (type != "default" && type != "mrope")
            bad_config(f, rope_key + ".rope_type", "is \"" + type + "\" (only the default RoPE is implemented)");
        if (rope->contains("rope_theta")) c.rope_theta = rope->at("rope_theta").get<double>();
    }
    if (j.contains("rope_theta")) c.rope_theta = j.at("rope_theta").get<double>();
    if (c.head_dim % 2 != 0) bad_config(f, k + "head_dim", "must be even for RoPE");
    return c;
}

std::vector<model::GroupSpec> qwen3_text_groups(Qwen3TextConfig & c, const std::vector<std::string> & tensor_names) {
    // The language model's prefix in the checkpoint: Qwen3VLForConditionalGeneration (transformers >= 4.52) saves
    // model.language_model.*, older exports model.*, a bare text model none.
    static const char * const kPrefixes[] = {"model.language_model.", "language_model.model.", "model.", ""};
    c.weight_prefix = tower::find_weight_prefix(tensor_names, kPrefixes, "a Qwen3-VL text encoder");
    std::vector<model::GroupSpec> groups;
    groups.push_back({"embed_tokens", {c.weight_prefix + "embed_tokens.weight"}});
    for (std::int64_t i = 0; i < c.num_layers; ++i) {
        const std::string base = c.weight_prefix + "layers." + std::to_string(i) + ".";
        model::GroupSpec g{"layers." + std::to_string(i), {}};
        for (const char * t : kLayerTensors) g.tensors.push_back(base + t);
        if (c.attention_bias)
            for (const char * p : {"q_proj", "k_proj", "v_proj", "o_proj"}) g.tensors.push_back(base + "self_attn." + p + ".bias");
        groups.push_back(std::move(g));
    }
    return groups;
}

at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids_in, const at::Tensor & mask_in, at::ScalarType dtype,
                                         at::Device device, const TextTowerCallbacks & cb) {
    if (ids_in.dim() != 2 || mask_in.sizes() != ids_in.sizes())
        throw RuntimeError("qwen3 text tower: ids and mask must both be [batch, length]");
    const auto ids = ids_in.to(device, at::kLong);
    const auto mask = mask_in.to(device, at::kLong);
    const int64_t B = ids.size(0), L = ids.size(1), H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
    if (at::logical_or(ids < 0, ids >= c.vocab_size).any().item<bool>())
        throw RuntimeError("qwen3 text tower: a token id is outside the vocabulary (" + std::to_string(c.vocab_size) +
                           "): the tokenizer and the text encoder's config do not belong together");

    at::Tensor h = tower::with_group(weights, 0, [&](const model::GroupTensors & t) {
        return at::embedding(t.at(c.weight_prefix + "embed_tokens.weight"), ids).to(dtype);
    });

    // RoPE: inv_freq in float32 as the reference, angles pos * inv_freq, cos/sin duplicated over the two halves,
    // cast to the activation dtype.
    // Text-only positions are 0 .. L-1 whatever the padding: Qwen3VLModel computes 3-D positions only for inputs
    // with images, and the text model falls back to arange (padding included).
    const auto pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device)).view({1, L}).expand({B, L});
    const auto expo = at::arange(0, D, 2, at::TensorOptions().dtype(at::kFloat)) / double(D);
    const auto inv_freq = (1.0 / at::pow(at::Scalar(c.rope_theta), expo)).to(device);  // float32, as the reference
    auto freqs = pos.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, L, D/2]
    auto emb = at::cat({freqs, freqs}, -1);
    const auto cos = emb.cos().to(dtype).unsqueeze(1), sin = emb.sin().to(dtype).unsqueeze(1);  // [B, 1, L, D]

    // Causal and key-padding mask [B, 1, L, L]. A padded query row would see no key at all (left padding): let
    // it see itself so no row is empty (its output is dropped with the padding).
    // Without padding the attention is plain causal (is_causal) and no mask is built.
    const bool no_padding = (mask != 0).all().item<bool>();
    at::Tensor allowed;
    if (!no_padding) {
        const auto bools = at::TensorOptions().dtype(at::kBool).device(device);
        auto causal = at::ones({L, L}, bools).tril().view({1, 1, L, L});
        allowed = at::logical_or(at::logical_and(causal, (mask != 0).view({B, 1, 1, L})), at::eye(L, bools).view({1, 1, L, L}));
    }

    const double scale = 1.0 / std::sqrt(double(D));
    const std::optional<at::Tensor> attend_mask = no_padding ? std::nullopt : std::optional<at::Tensor>(allowed);
    tower::for_each_layer(weights, c.num_layers, c.weight_prefix, cb, [&](const model::GroupTensors & t,
                                                                         const std::string & p, std::int64_t) {
        auto x = rms_norm(h, t.at(p + "input_layernorm.weight"), c.rms_norm_eps);
        auto q = rms_norm(linear(x, t, p + "self_attn.q_proj", c.attention_bias).view({B, L, H, D}),
                          t.at(p + "self_attn.q_norm.weight"), c.rms_norm_eps).transpose(1, 2);
        auto k = rms_norm(linear(x, t, p + "self_attn.k_proj", c.attention_bias).view({B, L, KV, D}),
                          t.at(p + "self_attn.k_norm.weight"), c.rms_norm_eps).transpose(1, 2);
        auto v = linear(x, t, p + "self_attn.v_proj", c.attention_bias).view({B, L, KV, D}).transpose(1, 2);
        const auto a = tower::attend(q, k, v, cos, sin, attend_mask, std::nullopt, scale);
        h = h + linear(a, t, p + "self_attn.o_proj", c.attention_bias);
        x = rms_norm(h, t.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
        auto mlp = linear(at::silu(linear(x, t, p + "mlp.gate_proj")) * linear(x, t, p + "mlp.up_proj"), t,
                          p + "mlp.down_proj");
        h = h + mlp;
    });
    return h;
}

}  // namespace ddo::text
