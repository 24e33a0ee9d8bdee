// LTX2ImageTextConnectors forward (reference: the composed LTX2ImageTextConnectors of
// tools/reference/ltx2_image_fixtures.py: diffusers 0.42.1 per_token_rms_norm / per_layer_masked_mean_norm,
// LTX2ConnectorTransformer1d; operations in their order, as connectors.cpp does for the video half).
#include "image_connectors.hpp"

#include <cmath>
#include <string>

#include "attention.hpp"
#include "ddo/error.hpp"
#include "rope.hpp"
#include "transformer.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kEps = 1e-6;
const std::string kConnector = "video_connector";

std::string block_name(int64_t i) { return connector_block_name(true, i); }
std::string projection_name(const ConnectorsConfig & c) {
    return c.per_modality_projections ? "video_text_proj_in" : "text_proj_in";
}

TensorSpecs projection_specs(const ConnectorsConfig & c) { return connector_projection_specs(c, projection_name(c)); }

std::vector<std::string> names_of(const TensorSpecs & s) {
    std::vector<std::string> n;
    for (const auto & [name, shape] : s) n.push_back(name);
    return n;
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
        auto b = connector_block_specs(c.video, block_name(i));
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
    for (int64_t i = 0; i < c.video.layers; ++i) g.push_back({block_name(i), names_of(connector_block_specs(c.video, block_name(i)))});
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
            h = linear(w, "text_proj_in", masked_mean_norm(x, mask.to(at::kLong).sum(-1), PaddingSide::left, 8.0),
                       c.proj_bias);
        }
    }
    const auto add_mask = additive_text_mask(mask, h.scalar_type());
    // LTX2ConnectorTransformer1d.forward.
    const auto [out, out_mask] = connector_transformer(c, w, true, h, add_mask,
                                                       {"LTX-2 image text connectors", "pad the prompt embeddings to"});
    auto binary = (out_mask < 1e-6).to(at::kLong).reshape({out.size(0), out.size(1), 1});
    return {out * binary, binary.squeeze(-1)};
}

}  // namespace ddo::ltx2
