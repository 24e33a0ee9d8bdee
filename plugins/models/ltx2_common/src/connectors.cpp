// LTX2TextConnectors forward (reference: diffusers 0.42.1 pipelines/ltx2/connectors.py: per_layer_masked_mean_norm,
// per_token_rms_norm, LTX2RotaryPosEmbed1d, LTX2TransformerBlock1d, LTX2ConnectorTransformer1d.forward,
// LTX2TextConnectors.forward; operations in their order).
#include "connectors.hpp"

#include <cmath>
#include <limits>

#include <ATen/Dispatch.h>

#include "attention.hpp"
#include "ddo/error.hpp"
#include "rope.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kEps = 1e-6;                   // connector norms, feature extractors
constexpr double kRegisterThreshold = -9000.0;  // attn_mask_binarize_threshold

std::string connector_name(bool video) { return video ? "video_connector" : "audio_connector"; }
std::string block_name(bool video, int64_t i) { return connector_block_name(video, i); }

void add_linear(TensorSpecs & s, const std::string & p, int64_t out, int64_t in, bool bias) {
    s.push_back({p + ".weight", {out, in}});
    if (bias) s.push_back({p + ".bias", {out}});
}

double finfo_max(at::ScalarType dt) {
    double m = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dt, "finfo_max",
                                    [&] { m = double(std::numeric_limits<scalar_t>::max()); });
    return m;
}

std::vector<std::string> projection_names(const ConnectorsConfig & c) {
    if (c.per_modality_projections) return {"video_text_proj_in", "audio_text_proj_in"};
    return {"text_proj_in"};
}

}  // namespace

std::string connector_block_name(bool video, int64_t i) {
    return connector_name(video) + ".transformer_blocks." + std::to_string(i);
}

TensorSpecs connector_projection_specs(const ConnectorsConfig & c, const std::string & name) {
    const int64_t in = c.caption_channels * c.text_proj_in_factor;
    TensorSpecs s;
    const int64_t out = name == "text_proj_in" ? c.caption_channels
                        : name == "video_text_proj_in" ? c.video_hidden_dim
                                                       : c.audio_hidden_dim;
    add_linear(s, name, out, in, c.proj_bias);
    return s;
}

TensorSpecs connector_block_specs(const ConnectorSpec & k, const std::string & p) {
    const int64_t d = k.inner_dim();
    TensorSpecs s;
    for (const char * n : {".attn1.to_q", ".attn1.to_k", ".attn1.to_v", ".attn1.to_out.0"}) add_linear(s, p + n, d, d, true);
    s.push_back({p + ".attn1.norm_q.weight", {d}});
    s.push_back({p + ".attn1.norm_k.weight", {d}});
    if (k.gated) add_linear(s, p + ".attn1.to_gate_logits", k.heads, d, true);
    add_linear(s, p + ".ff.net.0.proj", 4 * d, d, true);
    add_linear(s, p + ".ff.net.2", d, 4 * d, true);
    return s;
}

at::Tensor masked_mean_norm(const at::Tensor & x, const at::Tensor & lengths, PaddingSide side, double scale) {
    const int64_t b = x.size(0), l = x.size(1), ch = x.size(2), f = x.size(3);
    auto idx = at::arange(l, x.options().dtype(at::kLong)).unsqueeze(0);
    auto mask = side == PaddingSide::right ? idx < lengths.unsqueeze(1) : idx >= (l - lengths.unsqueeze(1));
    mask = mask.unsqueeze(-1).unsqueeze(-1);  // [B, L, 1, 1]
    auto masked = x.masked_fill(~mask, 0.0);
    auto valid = (lengths * ch).view({b, 1, 1, 1});
    auto mean = masked.sum({1, 2}, true) / (valid + kEps);
    auto lo = x.masked_fill(~mask, std::numeric_limits<double>::infinity()).amin({1, 2}, true);
    auto hi = x.masked_fill(~mask, -std::numeric_limits<double>::infinity()).amax({1, 2}, true);
    auto y = (x - mean) / (hi - lo + kEps) * scale;
    y = y.flatten(2).masked_fill(~mask.squeeze(-1).expand({-1, -1, ch * f}), 0.0);
    return y.to(x.scalar_type());
}

at::Tensor additive_text_mask(const at::Tensor & mask, at::ScalarType dt) {
    auto add_mask = (mask.to(at::kLong) - 1).to(dt);
    return add_mask.reshape({add_mask.size(0), 1, -1, add_mask.size(-1)}) * finfo_max(dt);
}

std::pair<at::Tensor, at::Tensor> connector_transformer(const ConnectorsConfig & c, Weights & w, bool video,
                                                        at::Tensor x, at::Tensor mask, const RegisterWords & words) {
    const ConnectorSpec & k = video ? c.video : c.audio;
    const int64_t b = x.size(0), l = x.size(1);
    if (k.registers) {
        const Weights::Scope scope(w, connector_name(video));
        const int64_t r = *k.registers;
        if (l % r != 0)
            throw UsageError(words.owner + ": the text length " + std::to_string(l) + " must be a multiple of the " +
                             connector_name(video) + "'s " + std::to_string(r) + " learnable registers; " +
                             words.fix + " a multiple of " + std::to_string(r));
        auto regs = w.get(connector_name(video) + ".learnable_registers").unsqueeze(0).expand({l / r, -1, -1})
                        .reshape({l, -1});
        auto binary = (mask >= kRegisterThreshold).to(at::kInt);
        if (binary.dim() == 4) binary = binary.squeeze(1).squeeze(1);
        auto order = at::argsort(1 - binary, /*stable=*/true, 1);
        auto front = at::gather(x, 1, order.unsqueeze(-1).expand({-1, -1, x.size(-1)}));
        auto num_valid = binary.sum(1, true);
        auto positions = at::arange(l, x.options().dtype(at::kLong)).unsqueeze(0);
        auto front_mask = (positions < num_valid).unsqueeze(-1);
        x = at::where(front_mask, front, regs.unsqueeze(0).expand({b, -1, -1}).to(x.scalar_type()));
        mask = at::zeros_like(mask);
    }
    const auto rope = connector_rope_tables(connector_rope(c, video), b, l, double(c.rope_base_seq_len), x.device());
    for (int64_t i = 0; i < k.layers; ++i) {
        const std::string p = block_name(video, i);
        const Weights::Scope scope(w, p);
        const AttentionSpec as{p + ".attn1", k.heads, k.gated, true, true, kEps};
        x = x + attention(w, as, at::rms_norm(x, {x.size(-1)}, {}, kEps), std::nullopt, mask, &rope, nullptr);
        x = x + feed_forward(w, p + ".ff", at::rms_norm(x, {x.size(-1)}, {}, kEps));
    }
    return {at::rms_norm(x, {x.size(-1)}, {}, kEps), mask};
}

ConnectorsConfig ConnectorsConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    const ConfigReader r(j, file);
    ConnectorsConfig c;
    r.read("caption_channels", c.caption_channels);
    r.read("text_proj_in_factor", c.text_proj_in_factor);
    for (bool video : {true, false}) {
        ConnectorSpec & k = video ? c.video : c.audio;
        const std::string m = video ? "video" : "audio";
        const std::string heads = m + "_connector_num_attention_heads", dim = m + "_connector_attention_head_dim",
                          layers = m + "_connector_num_layers", regs = m + "_connector_num_learnable_registers",
                          gated = m + "_gated_attn";
        r.read(heads.c_str(), k.heads);
        r.read(dim.c_str(), k.head_dim);
        r.read(layers.c_str(), k.layers);
        if (r.is_null(regs.c_str())) {
            k.registers.reset();
        } else {
            int64_t n = *k.registers;
            r.read(regs.c_str(), n);
            if (n <= 0) r.fail(regs, "is " + std::to_string(n) + "; it must be positive or null");
            k.registers = n;
        }
        r.read(gated.c_str(), k.gated);
        if (k.heads <= 0 || k.head_dim <= 0 || k.layers < 0) r.fail(heads, "/ " + dim + " / " + layers + " must be positive");
    }
    r.read("connector_rope_base_seq_len", c.rope_base_seq_len);
    r.read("rope_theta", c.rope_theta);
    r.read("rope_double_precision", c.rope_double_precision);
    c.rope_type = r.rope_type("rope_type", RopeType::interleaved);
    r.read("per_modality_projections", c.per_modality_projections);
    r.read("video_hidden_dim", c.video_hidden_dim);
    r.read("audio_hidden_dim", c.audio_hidden_dim);
    r.read("proj_bias", c.proj_bias);
    if (c.caption_channels <= 0 || c.text_proj_in_factor <= 0)
        r.fail("caption_channels", "and text_proj_in_factor must be positive");
    for (bool video : {true, false}) {
        const ConnectorSpec & k = video ? c.video : c.audio;
        const std::string m = video ? "video" : "audio";
        const std::string src = c.per_modality_projections ? m + "_hidden_dim" : "caption_channels";
        const int64_t want = c.per_modality_projections ? (video ? c.video_hidden_dim : c.audio_hidden_dim)
                                                        : c.caption_channels;
        if (k.inner_dim() != want)
            r.fail(m + "_connector_num_attention_heads", "* " + m + "_connector_attention_head_dim is " +
                                                             std::to_string(k.inner_dim()) + "; it must equal " + src +
                                                             " (" + std::to_string(want) + ")");
    }
    if (c.rope_type == RopeType::split)
        for (const ConnectorSpec * k : {&c.video, &c.audio})
            if (k->inner_dim() % 2 != 0 || (k->inner_dim() / 2) % k->heads != 0)
                r.fail("rope_type", "is 'split' but a connector width/2 is not divisible by its heads");
    return c;
}

ConnectorsConfig ConnectorsConfig::from_file(const std::filesystem::path & config_json) {
    return from_json(read_config_json(config_json), config_json);
}

RopeSpec connector_rope(const ConnectorsConfig & c, bool video) {
    const ConnectorSpec & k = video ? c.video : c.audio;
    return {k.inner_dim(), k.heads, {}, c.rope_theta, c.rope_double_precision, c.rope_type};
}

TensorSpecs connector_tensor_specs(const ConnectorsConfig & c) {
    TensorSpecs s;
    for (const auto & n : projection_names(c)) {
        auto p = connector_projection_specs(c, n);
        s.insert(s.end(), p.begin(), p.end());
    }
    for (bool video : {true, false}) {
        const ConnectorSpec & k = video ? c.video : c.audio;
        if (k.registers) s.push_back({connector_name(video) + ".learnable_registers", {*k.registers, k.inner_dim()}});
        for (int64_t i = 0; i < k.layers; ++i) {
            auto b = connector_block_specs(k, block_name(video, i));
            s.insert(s.end(), b.begin(), b.end());
        }
    }
    return s;
}

void validate_connectors(const model::TensorFile & f, const ConnectorsConfig & c) {
    validate_tensors(f, connector_tensor_specs(c), "LTX-2 text connectors");
}

std::vector<model::GroupSpec> connector_groups(const ConnectorsConfig & c) {
    std::vector<model::GroupSpec> g;
    auto names_of = [](const TensorSpecs & s) {
        std::vector<std::string> n;
        for (const auto & [name, shape] : s) n.push_back(name);
        return n;
    };
    for (const auto & n : projection_names(c)) g.push_back({n, names_of(connector_projection_specs(c, n))});
    for (bool video : {true, false}) {
        const ConnectorSpec & k = video ? c.video : c.audio;
        if (k.registers) g.push_back({connector_name(video), {connector_name(video) + ".learnable_registers"}});
        for (int64_t i = 0; i < k.layers; ++i)
            g.push_back({block_name(video, i), names_of(connector_block_specs(k, block_name(video, i)))});
    }
    return g;
}

ConnectorsOutput connectors_forward(const ConnectorsConfig & c, Weights & w, const at::Tensor & text_hidden_states,
                                    const at::Tensor & attention_mask, PaddingSide padding_side, double scale_factor) {
    auto x = text_hidden_states.to(w.device(), w.dtype());
    if (x.dim() == 3) x = x.unflatten(2, {c.caption_channels, -1});
    if (x.dim() != 4 || x.size(2) != c.caption_channels || x.size(3) != c.text_proj_in_factor)
        throw UsageError("LTX-2 text connectors: text hidden states have shape " + model::shape_str(x.sizes()) +
                         "; expected [B, L, " + std::to_string(c.caption_channels) + ", " +
                         std::to_string(c.text_proj_in_factor) + "] (the text encoder's stacked hidden states)");
    const auto mask = attention_mask.to(w.device());
    at::Tensor video_in, audio_in;
    if (c.per_modality_projections) {
        auto n = x * at::rsqrt(x.pow(2).mean(2, true) + kEps);
        n = n.flatten(2, 3);
        n = at::where(mask.to(at::kBool).unsqueeze(-1), n, at::zeros_like(n));
        const auto v = n * std::sqrt(double(c.video_hidden_dim) / double(c.caption_channels));
        const auto a = n * std::sqrt(double(c.audio_hidden_dim) / double(c.caption_channels));
        {
            const Weights::Scope scope(w, "video_text_proj_in");
            video_in = linear(w, "video_text_proj_in", v, c.proj_bias);
        }
        const Weights::Scope scope(w, "audio_text_proj_in");
        audio_in = linear(w, "audio_text_proj_in", a, c.proj_bias);
    } else {
        auto n = masked_mean_norm(x, mask.to(at::kLong).sum(-1), padding_side, scale_factor);
        const Weights::Scope scope(w, "text_proj_in");
        video_in = audio_in = linear(w, "text_proj_in", n, c.proj_bias);
    }
    const auto add_mask = additive_text_mask(mask, video_in.scalar_type());
    const RegisterWords words{"LTX-2 text connectors", "set max_sequence_length to"};
    auto [video, video_mask] = connector_transformer(c, w, true, video_in, add_mask, words);
    auto binary = (video_mask < 1e-6).to(at::kLong).reshape({video.size(0), video.size(1), 1});
    video = video * binary;
    auto audio = connector_transformer(c, w, false, audio_in, add_mask, words).first;
    return {video, audio, binary.squeeze(-1)};
}

}  // namespace ddo::ltx2
