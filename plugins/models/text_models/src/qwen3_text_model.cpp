#include "qwen3_text_model.hpp"

#include <ATen/ATen.h>

#include <algorithm>

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
        if (rope->contains("mrope_section")) {
            const json & m = rope->at("mrope_section");
            if (!m.is_array() || m.size() != 3)
                bad_config(f, rope_key + ".mrope_section", "must be three integers (t, h, w)");
            for (std::size_t a = 0; a < 3; ++a) {
                if (!m[a].is_number_integer() || m[a].get<std::int64_t>() < 0)
                    bad_config(f, rope_key + ".mrope_section", "must be three non-negative integers (t, h, w)");
                c.mrope_section[a] = m[a].get<std::int64_t>();
            }
        }
    }
    if (j.contains("rope_theta")) c.rope_theta = j.at("rope_theta").get<double>();
    if (root.contains("image_token_id") && !root.at("image_token_id").is_null())
        c.image_token_id = get_int(root, f, "", "image_token_id");
    if (root.contains("vision_config") && root.at("vision_config").is_object() &&
        root.at("vision_config").contains("spatial_merge_size"))
        c.spatial_merge_size = get_int(root.at("vision_config"), f, "vision_config.", "spatial_merge_size");
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

namespace {

[[noreturn]] void mismatch(const std::string & what) {
    throw RuntimeError("qwen3 text tower: the prompt's image tokens do not match the vision features: " + what +
                       " (one <|vision_start|><|image_pad|><|vision_end|> slot per image, expanded to its merged "
                       "patch count by the processor)");
}

}  // namespace

at::Tensor qwen3_vl_position_ids(const at::Tensor & ids_in, const at::Tensor & mask_in, const VisionTokens & v) {
    if (ids_in.dim() != 2 || mask_in.sizes() != ids_in.sizes())
        throw RuntimeError("qwen3 text tower: ids and mask must both be [batch, length]");
    if (v.spatial_merge_size < 1) throw RuntimeError("qwen3 text tower: spatial_merge_size must be positive");
    const auto ids = ids_in.to(at::kCPU, at::kLong).contiguous(), mask = mask_in.to(at::kCPU, at::kLong).contiguous();
    const std::int64_t B = ids.size(0), L = ids.size(1), m = v.spatial_merge_size;
    auto pos = at::zeros({3, B, L}, at::kLong);  // padding keeps 0 (get_rope_index's zeros)
    auto P = pos.accessor<std::int64_t, 3>();
    const auto I = ids.accessor<std::int64_t, 2>(), K = mask.accessor<std::int64_t, 2>();
    std::size_t next_grid = 0;  // the grids run over the whole batch in order, as get_rope_index's iterator
    for (std::int64_t b = 0; b < B; ++b) {
        std::int64_t cur = 0;
        for (std::int64_t i = 0; i < L;) {
            if (K[b][i] == 0) {
                ++i;
                continue;
            }
            if (I[b][i] != v.image_token_id) {  // text: the same position on all three axes
                for (int a = 0; a < 3; ++a) P[a][b][i] = cur;
                ++cur, ++i;
                continue;
            }
            // A run of image tokens among the unpadded ones (itertools.groupby over mm_token_type_ids).
            std::vector<std::int64_t> run;
            for (; i < L && (K[b][i] == 0 || I[b][i] == v.image_token_id); ++i)
                if (K[b][i] != 0) run.push_back(i);
            if (next_grid >= v.grid_thw.size())
                mismatch("more image-token runs than the " + std::to_string(v.grid_thw.size()) + " images given");
            const auto & g = v.grid_thw[next_grid++];
            const std::int64_t t = g[0], h = g[1] / m, w = g[2] / m;
            if (std::int64_t(run.size()) != t * h * w)
                mismatch("image " + std::to_string(next_grid) + " has " + std::to_string(run.size()) +
                         " pad tokens for a grid of " + std::to_string(t * h * w) + " merged patches");
            std::size_t k = 0;
            for (std::int64_t tt = 0; tt < t; ++tt)
                for (std::int64_t hh = 0; hh < h; ++hh)
                    for (std::int64_t ww = 0; ww < w; ++ww, ++k) {
                        P[0][b][run[k]] = cur + tt;
                        P[1][b][run[k]] = cur + hh;
                        P[2][b][run[k]] = cur + ww;
                    }
            cur += std::max(g[1], g[2]) / m;
        }
    }
    if (next_grid != v.grid_thw.size())
        mismatch(std::to_string(v.grid_thw.size()) + " images given for " + std::to_string(next_grid) +
                 " image-token runs");
    return pos;
}

at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids_in, const at::Tensor & mask_in, at::ScalarType dtype,
                                         at::Device device, const TextTowerCallbacks & cb) {
    return qwen3_last_hidden_before_norm(weights, c, ids_in, mask_in, nullptr, dtype, device, cb);
}

namespace {

// The image side of a text-tower call, checked against the ids before any weight is read: where the <|image_pad|>
// tokens are, their 3-D positions and the deepstack features on the device
// (Qwen3VLModel.get_placeholder_mask counts the pad tokens of the whole batch).
struct VisionInputs {
    at::Tensor visual, pos3;  // [B, L] bool; [3, B, L]
    std::vector<at::Tensor> deepstack;
};

VisionInputs vision_inputs(const Qwen3TextConfig & c, const at::Tensor & ids, const at::Tensor & mask,
                           const VisionTokens & vision, at::ScalarType dtype, at::Device device) {
    VisionInputs v;
    v.visual = ids == vision.image_token_id;
    const auto n_tokens = v.visual.sum().item<std::int64_t>();
    const auto & e = vision.embeds;
    if (!e.defined() || e.dim() != 2 || e.size(1) != c.hidden_size)
        mismatch("the embeds must be [N, " + std::to_string(c.hidden_size) + "] (the text hidden size)");
    if (n_tokens != e.size(0))
        mismatch(std::to_string(n_tokens) + " <|image_pad|> tokens (id " + std::to_string(vision.image_token_id) +
                 ") for " + std::to_string(e.size(0)) + " image embeddings");
    for (const auto & d : vision.deepstack)
        if (!d.defined() || d.sizes() != e.sizes())
            mismatch("a deepstack feature is not shaped as the embeds [" + std::to_string(e.size(0)) + ", " +
                     std::to_string(e.size(1)) + "]");
    v.pos3 = qwen3_vl_position_ids(ids, mask, vision).to(device);
    for (const auto & d : vision.deepstack) v.deepstack.push_back(d.to(device, dtype));
    return v;
}

// RoPE cos/sin [B, 1, L, D] in the activation dtype: inv_freq in float32 as the reference, angles pos * inv_freq,
// duplicated over the two halves. Text-only positions are 0 .. L-1 whatever the padding (Qwen3VLModel computes 3-D
// positions only for inputs with images, and the text model falls back to arange, padding included); with images,
// interleaved M-RoPE (recomposition_frequencies): frequency j from the t axis, except j = 1, 4, .. below
// 3 * section[1] from h and j = 2, 5, .. below 3 * section[2] from w.
std::pair<at::Tensor, at::Tensor> rope_tables(const Qwen3TextConfig & c, std::int64_t B, std::int64_t L,
                                              const at::Tensor & pos3, at::ScalarType dtype, at::Device device) {
    const std::int64_t D = c.head_dim;
    const auto expo = at::arange(0, D, 2, at::TensorOptions().dtype(at::kFloat)) / double(D);
    const auto inv_freq = (1.0 / at::pow(at::Scalar(c.rope_theta), expo)).to(device);  // float32, as the reference
    at::Tensor freqs;
    if (!pos3.defined()) {
        const auto pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device)).view({1, L}).expand({B, L});
        freqs = pos.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, L, D/2]
    } else {
        const auto per_axis = pos3.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [3, B, L, D/2]
        freqs = per_axis[0].clone();
        for (std::int64_t a = 1; a <= 2; ++a)
            for (std::int64_t j = a; j < std::min(3 * c.mrope_section[std::size_t(a)], D / 2); j += 3)
                freqs.select(-1, j).copy_(per_axis[a].select(-1, j));
    }
    auto emb = at::cat({freqs, freqs}, -1);
    return {emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)};
}

// Causal and key-padding mask [B, 1, L, L], or none without padding (the attention is then plain causal). A padded
// query row would see no key at all (left padding): it sees itself so no row is empty (its output is dropped with
// the padding).
std::optional<at::Tensor> attention_mask(const at::Tensor & mask, at::Device device) {
    if ((mask != 0).all().item<bool>()) return std::nullopt;
    const std::int64_t B = mask.size(0), L = mask.size(1);
    const auto bools = at::TensorOptions().dtype(at::kBool).device(device);
    auto causal = at::ones({L, L}, bools).tril().view({1, 1, L, L});
    return at::logical_or(at::logical_and(causal, (mask != 0).view({B, 1, 1, L})), at::eye(L, bools).view({1, 1, L, L}));
}

}  // namespace

at::Tensor qwen3_last_hidden_before_norm(model::ComponentWeights & weights, const Qwen3TextConfig & c,
                                         const at::Tensor & ids_in, const at::Tensor & mask_in,
                                         const VisionTokens * vision, at::ScalarType dtype, at::Device device,
                                         const TextTowerCallbacks & cb) {
    if (ids_in.dim() != 2 || mask_in.sizes() != ids_in.sizes())
        throw RuntimeError("qwen3 text tower: ids and mask must both be [batch, length]");
    const auto ids = ids_in.to(device, at::kLong);
    const auto mask = mask_in.to(device, at::kLong);
    const int64_t B = ids.size(0), L = ids.size(1), H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
    if (at::logical_or(ids < 0, ids >= c.vocab_size).any().item<bool>())
        throw RuntimeError("qwen3 text tower: a token id is outside the vocabulary (" + std::to_string(c.vocab_size) +
                           "): the tokenizer and the text encoder's config do not belong together");
    const VisionInputs v = vision ? vision_inputs(c, ids, mask, *vision, dtype, device) : VisionInputs{};

    at::Tensor h = tower::with_group(weights, 0, [&](const model::GroupTensors & t) {
        return at::embedding(t.at(c.weight_prefix + "embed_tokens.weight"), ids).to(dtype);
    });
    if (vision)  // inputs_embeds.masked_scatter(image_mask, image_embeds): row-major over (batch, sequence)
        h = h.masked_scatter(v.visual.unsqueeze(-1).expand_as(h), vision->embeds.to(device, dtype));
    const auto rope = rope_tables(c, B, L, v.pos3, dtype, device);
    const at::Tensor & cos = rope.first, & sin = rope.second;
    const auto attend_mask = attention_mask(mask, device);

    const double scale = 1.0 / std::sqrt(double(D));
    tower::for_each_layer(weights, c.num_layers, c.weight_prefix, cb, [&](const model::GroupTensors & t,
                                                                         const std::string & p, std::int64_t i) {
        auto x = rms_norm(h, t.at(p + "input_layernorm.weight"), c.rms_norm_eps);
        auto q = rms_norm(linear(x, t, p + "self_attn.q_proj", c.attention_bias).view({B, L, H, D}),
                          t.at(p + "self_attn.q_norm.weight"), c.rms_norm_eps).transpose(1, 2);
        auto k = rms_norm(linear(x, t, p + "self_attn.k_proj", c.attention_bias).view({B, L, KV, D}),
                          t.at(p + "self_attn.k_norm.weight"), c.rms_norm_eps).transpose(1, 2);
        auto v_ = linear(x, t, p + "self_attn.v_proj", c.attention_bias).view({B, L, KV, D}).transpose(1, 2);
        const auto a = tower::attend(q, k, v_, cos, sin, attend_mask, std::nullopt, scale);
        h = h + linear(a, t, p + "self_attn.o_proj", c.attention_bias);
        x = rms_norm(h, t.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
        auto mlp = linear(at::silu(linear(x, t, p + "mlp.gate_proj")) * linear(x, t, p + "mlp.up_proj"), t,
                          p + "mlp.down_proj");
        h = h + mlp;
        // _deepstack_process: hidden[visual] = hidden[visual] + deepstack[i] after layer i < k.
        if (i < std::int64_t(v.deepstack.size()))
            h.index_put_({v.visual}, h.index({v.visual}) + v.deepstack[std::size_t(i)]);
    });
    return h;
}

void qwen3_tower_memory(model::StageMemory & s, const Qwen3TextConfig & c, std::int64_t batch, std::int64_t tokens,
                        at::ScalarType dtype) {
    const std::int64_t B = batch, L = std::max<std::int64_t>(1, tokens), H = c.hidden_size;
    const std::int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
    s.tensor("text stream", {B, L, H}, dtype, 3, model::MemorySide::device,
             "the layer's input, its post-attention norm and the MLP's output");
    s.tensor("text attention", {B, L, Q}, dtype, 2, model::MemorySide::device, "the layer's normed q and attention output");
    s.tensor("text keys and values", {B, L, KV}, dtype, 2, model::MemorySide::device, "the layer's k and v");
    s.tensor("text MLP", {B, L, c.intermediate_size}, dtype, 4, model::MemorySide::device,
             "gate, SiLU, up and their product, live together in one statement");
    s.tensor("text RoPE tables", {B, 1, L, c.head_dim}, dtype, 2, model::MemorySide::device, "cos and sin");
    if (B > 1)
        s.tensor("text attention mask", {B, 1, L, L}, at::kBool, 1, model::MemorySide::device,
                 "causal and key padding (a batch whose rows differ in length)");
}

}  // namespace ddo::text
