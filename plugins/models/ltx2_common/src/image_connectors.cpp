// LTX2ImageTextConnectors forward (reference: the composed LTX2ImageTextConnectors of
// tools/reference/ltx2_image_fixtures.py: diffusers 0.42.1 per_token_rms_norm / per_layer_masked_mean_norm,
// LTX2ConnectorTransformer1d; operations in their order, as connectors.cpp does for the video half).
#include "image_connectors.hpp"

#include <cmath>
#include <limits>
#include <string>

#include <ATen/Dispatch.h>

#include "attention.hpp"
#include "ddo/error.hpp"
#include "rope.hpp"
#include "transformer.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kEps = 1e-6;
constexpr double kRegisterThreshold = -9000.0;  // attn_mask_binarize_threshold
const std::string kConnector = "video_connector";

std::string block_name(int64_t i) { return kConnector + ".transformer_blocks." + std::to_string(i); }
std::string projection_name(const ConnectorsConfig & c) {
    return c.per_modality_projections ? "video_text_proj_in" : "text_proj_in";
}

void add_linear(TensorSpecs & s, const std::string & p, int64_t out, int64_t in, bool bias) {
    s.push_back({p + ".weight", {out, in}});
    if (bias) s.push_back({p + ".bias", {out}});
}

TensorSpecs projection_specs(const ConnectorsConfig & c) {
    TensorSpecs s;
    add_linear(s, projection_name(c), c.per_modality_projections ? c.video_hidden_dim : c.caption_channels,
               c.caption_channels * c.text_proj_in_factor, c.proj_bias);
    return s;
}

TensorSpecs block_specs(const ConnectorSpec & k, const std::string & p) {
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

std::vector<std::string> names_of(const TensorSpecs & s) {
    std::vector<std::string> n;
    for (const auto & [name, shape] : s) n.push_back(name);
    return n;
}

double finfo_max(at::ScalarType dt) {
    double m = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dt, "finfo_max",
                                    [&] { m = double(std::numeric_limits<scalar_t>::max()); });
    return m;
}

// per_layer_masked_mean_norm (left padding, scale 8): x [B, L, C, F] -> [B, L, C*F].
at::Tensor masked_mean_norm(const at::Tensor & x, const at::Tensor & lengths) {
    const int64_t b = x.size(0), l = x.size(1), ch = x.size(2), f = x.size(3);
    auto idx = at::arange(l, x.options().dtype(at::kLong)).unsqueeze(0);
    auto mask = (idx >= (l - lengths.unsqueeze(1))).unsqueeze(-1).unsqueeze(-1);
    auto mean = x.masked_fill(~mask, 0.0).sum({1, 2}, true) / ((lengths * ch).view({b, 1, 1, 1}) + kEps);
    auto lo = x.masked_fill(~mask, std::numeric_limits<double>::infinity()).amin({1, 2}, true);
    auto hi = x.masked_fill(~mask, -std::numeric_limits<double>::infinity()).amax({1, 2}, true);
    auto y = (x - mean) / (hi - lo + kEps) * 8.0;
    y = y.flatten(2).masked_fill(~mask.squeeze(-1).expand({-1, -1, ch * f}), 0.0);
    return y.to(x.scalar_type());
}

}  // namespace

ConnectorsConfig image_connectors_config(const nlohmann::json & j, const std::filesystem::path & file) {
    // LTX2TextConnectors' reader checks both branches; the image checkpoint has no audio keys, so the audio
    // branch mirrors the video one (unused) and only the video connector's settings are checked.
    nlohmann::json v = j;
    for (const char * k : {"num_attention_heads", "attention_head_dim", "num_layers", "num_learnable_registers"}) {
        const std::string key = std::string("video_connector_") + k;
        if (v.contains(key)) v[std::string("audio_connector_") + k] = v[key];
        else v.erase(std::string("audio_connector_") + k);
    }
    v["audio_hidden_dim"] = v.value("video_hidden_dim", nlohmann::json(4096));
    if (v.contains("video_gated_attn")) v["audio_gated_attn"] = v["video_gated_attn"];
    return ConnectorsConfig::from_json(v, file);
}

ConnectorsConfig image_connectors_config_from_file(const std::filesystem::path & config_json) {
    return image_connectors_config(read_config_json(config_json), config_json);
}

TensorSpecs image_connector_specs(const ConnectorsConfig & c) {
    auto s = projection_specs(c);
    if (c.video.registers) s.push_back({kConnector + ".learnable_registers", {*c.video.registers, c.video.inner_dim()}});
    for (int64_t i = 0; i < c.video.layers; ++i) {
        auto b = block_specs(c.video, block_name(i));
        s.insert(s.end(), b.begin(), b.end());
    }
    return s;
}

void validate_image_connectors(const model::TensorFile & f, const ConnectorsConfig & c) {
    validate_tensors(f, image_connector_specs(c), "LTX-2 image text connectors");
}

std::vector<model::GroupSpec> image_connector_groups(const ConnectorsConfig & c) {
    std::vector<model::GroupSpec> g;
    g.push_back({projection_name(c), names_of(projection_specs(c))});
    if (c.video.registers) g.push_back({kConnector, {kConnector + ".learnable_registers"}});
    for (int64_t i = 0; i < c.video.layers; ++i) g.push_back({block_name(i), names_of(block_specs(c.video, block_name(i)))});
    return g;
}

ImageText image_connectors_forward(const ConnectorsConfig & c, Weights & w, const at::Tensor & text_hidden_states,
                                   const at::Tensor & attention_mask) {
    auto x = text_hidden_states.to(w.device(), w.dtype());
    if (x.dim() == 3) x = x.unflatten(2, {c.caption_channels, -1});
    if (x.dim() != 4 || x.size(2) != c.caption_channels || x.size(3) != c.text_proj_in_factor)
        throw UsageError("LTX-2 image text connectors: text hidden states have shape " + model::shape_str(x.sizes()) +
                         "; expected [B, L, " + std::to_string(c.caption_channels) + " x " +
                         std::to_string(c.text_proj_in_factor) + "] (the text encoder's stacked hidden states)");
    const auto mask = attention_mask.to(w.device());
    at::Tensor h;
    {
        const Weights::Scope scope(w, projection_name(c));
        if (c.per_modality_projections) {
            auto n = (x * at::rsqrt(x.pow(2).mean(2, true) + kEps)).flatten(2, 3);
            n = at::where(mask.to(at::kBool).unsqueeze(-1), n, at::zeros_like(n));
            h = linear(w, "video_text_proj_in", n * std::sqrt(double(c.video_hidden_dim) / double(c.caption_channels)),
                       c.proj_bias);
        } else {
            h = linear(w, "text_proj_in", masked_mean_norm(x, mask.to(at::kLong).sum(-1)), c.proj_bias);
        }
    }
    const auto dt = h.scalar_type();
    const int64_t b = h.size(0), l = h.size(1);
    auto add_mask = (mask.to(at::kLong) - 1).to(dt).reshape({b, 1, -1, l}) * finfo_max(dt);

    // LTX2ConnectorTransformer1d.forward.
    const ConnectorSpec & k = c.video;
    if (k.registers) {
        const Weights::Scope scope(w, kConnector);
        const int64_t r = *k.registers;
        if (l % r != 0)
            throw UsageError("LTX-2 image text connectors: the text length " + std::to_string(l) +
                             " must be a multiple of the video_connector's " + std::to_string(r) +
                             " learnable registers; pad the prompt embeddings to a multiple of " + std::to_string(r));
        auto regs = w.get(kConnector + ".learnable_registers").unsqueeze(0).expand({l / r, -1, -1}).reshape({l, -1});
        auto binary = (add_mask >= kRegisterThreshold).to(at::kInt).squeeze(1).squeeze(1);
        auto order = at::argsort(1 - binary, /*stable=*/true, 1);
        auto front = at::gather(h, 1, order.unsqueeze(-1).expand({-1, -1, h.size(-1)}));
        auto positions = at::arange(l, h.options().dtype(at::kLong)).unsqueeze(0);
        auto front_mask = (positions < binary.sum(1, true)).unsqueeze(-1);
        h = at::where(front_mask, front, regs.unsqueeze(0).expand({b, -1, -1}).to(dt));
        add_mask = at::zeros_like(add_mask);
    }
    const auto rope = connector_rope_tables(connector_rope(c, true), b, l, double(c.rope_base_seq_len), h.device());
    for (int64_t i = 0; i < k.layers; ++i) {
        const std::string p = block_name(i);
        const Weights::Scope scope(w, p);
        const AttentionSpec as{p + ".attn1", k.heads, k.gated, true, true, kEps};
        h = h + attention(w, as, at::rms_norm(h, {h.size(-1)}, {}, kEps), std::nullopt, add_mask, &rope, nullptr);
        h = h + feed_forward(w, p + ".ff", at::rms_norm(h, {h.size(-1)}, {}, kEps));
    }
    h = at::rms_norm(h, {h.size(-1)}, {}, kEps);
    auto binary = (add_mask < 1e-6).to(at::kLong).reshape({b, l, 1});
    return {h * binary, binary.squeeze(-1)};
}

}  // namespace ddo::ltx2
