// LTX2TextConnectors (models.md §5.8): the stacked Gemma hidden states [B, L, C, F] -> the DiT's video and audio
// text embeddings. 2.0: per-layer masked mean/range normalisation and one shared text_proj_in; 2.3: per-token RMS
// normalisation, sqrt(width / C) factors and per-modality projections. Then one LTX2ConnectorTransformer1d per
// modality (learnable registers replacing the padding, 1-D RoPE, blocks, norm_out). Reference: diffusers 0.42.1
// pipelines/ltx2/connectors.py. Math runs in the weights' dtype on their device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"

#include "rope.hpp"
#include "transformer.hpp"
#include "transformer_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// One LTX2ConnectorTransformer1d.
struct ConnectorSpec {
    int64_t heads = 30;
    int64_t head_dim = 128;
    int64_t layers = 2;
    std::optional<int64_t> registers = 128;  // num_learnable_registers (None: no registers)
    bool gated = false;
    int64_t inner_dim() const { return heads * head_dim; }
};

// connectors/config.json (LTX2TextConnectors.__init__ defaults).
struct ConnectorsConfig {
    int64_t caption_channels = 3840;
    int64_t text_proj_in_factor = 49;
    ConnectorSpec video, audio;
    int64_t rope_base_seq_len = 4096;
    double rope_theta = 10000.0;
    bool rope_double_precision = true;
    RopeType rope_type = RopeType::interleaved;
    bool per_modality_projections = false;
    int64_t video_hidden_dim = 4096;
    int64_t audio_hidden_dim = 2048;
    bool proj_bias = false;

    // Throws UsageError naming file and key.
    static ConnectorsConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    static ConnectorsConfig from_file(const std::filesystem::path & config_json);
};

enum class PaddingSide { left, right };

// The video (or audio) connector's LTX2RotaryPosEmbed1d (for connector_rope_tables with c.rope_base_seq_len).
RopeSpec connector_rope(const ConnectorsConfig & c, bool video);

TensorSpecs connector_tensor_specs(const ConnectorsConfig & c);
// As validate_transformer: exactly the implied tensors, shapes, floating dtypes; RuntimeError naming tensor + file.
void validate_connectors(const model::TensorFile & f, const ConnectorsConfig & c);
// "text_proj_in" (2.0) or "video_text_proj_in", "audio_text_proj_in" (2.3): the C*F -> width projections, one group
// each; "video_connector" / "audio_connector" (registers, when present); one group per connector block,
// "video_connector.transformer_blocks.<i>", "audio_connector.transformer_blocks.<i>".
std::vector<model::GroupSpec> connector_groups(const ConnectorsConfig & c);

// The parts LTX2ImageTextConnectors (image_connectors.cpp) shares with LTX2TextConnectors:
// "<video|audio>_connector.transformer_blocks.<i>";
std::string connector_block_name(bool video, int64_t i);
// the projection `name` ("text_proj_in", "video_text_proj_in", "audio_text_proj_in") and one connector block;
TensorSpecs connector_projection_specs(const ConnectorsConfig & c, const std::string & name);
TensorSpecs connector_block_specs(const ConnectorSpec & k, const std::string & prefix);
// per_layer_masked_mean_norm: x [B, L, C, F], valid lengths [B] -> [B, L, C*F];
at::Tensor masked_mean_norm(const at::Tensor & x, const at::Tensor & lengths, PaddingSide side, double scale);
// a binary mask [B, L] as the additive attention mask [B, 1, 1, L] ((mask - 1) * finfo(dt).max);
at::Tensor additive_text_mask(const at::Tensor & mask, at::ScalarType dt);
// LTX2ConnectorTransformer1d.forward of the video (or audio) connector -> (hidden, the attention mask as it leaves
// the connector). UsageError "<owner>: the text length ... learnable registers; <fix> a multiple of <r>".
struct RegisterWords {
    std::string owner;  // "LTX-2 text connectors"
    std::string fix;    // "set max_sequence_length to"
};
std::pair<at::Tensor, at::Tensor> connector_transformer(const ConnectorsConfig & c, Weights & w, bool video,
                                                        at::Tensor x, at::Tensor add_mask, const RegisterWords & words);

struct ConnectorsOutput {
    at::Tensor video;  // [B, L, video width]
    at::Tensor audio;  // [B, L, audio width]
    at::Tensor mask;   // [B, L] int64 (binary; all ones, as the reference returns it)
};

// LTX2TextConnectors.forward. text_hidden_states: [B, L, C, F] or [B, L, C*F] (index c*F + f); attention_mask:
// [B, L] binary. padding_side and scale_factor apply to 2.0 (per_modality_projections false) only.
ConnectorsOutput connectors_forward(const ConnectorsConfig & c, Weights & w, const at::Tensor & text_hidden_states,
                                    const at::Tensor & attention_mask, PaddingSide padding_side = PaddingSide::left,
                                    double scale_factor = 8.0);

}  // namespace ddo::ltx2
