// LTX2ImageTextConnectors (models.md §6): LTX2TextConnectors with the audio branch removed. The stacked text
// encoder hidden states [B, L, C*F] -> the image DiT's text embedding: 2.3 per-token RMS normalisation, sqrt(width /
// C) and video_text_proj_in (per_modality_projections), or 2.0's masked mean/range normalisation and text_proj_in;
// then one LTX2ConnectorTransformer1d "video_connector" (learnable registers, 1-D RoPE, blocks, norm_out).
// Reference: the composed LTX2ImageTextConnectors of tools/reference/ltx2_image_fixtures.py (diffusers 0.42.1
// pipelines/ltx2/connectors.py pieces), as DEVAIEXP/ltx2-image-diffusers connectors_ltx2_image.py.
#pragma once

#include <filesystem>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "connectors.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// connectors/config.json of LTX2ImageTextConnectors read into the LTX-2 connectors config; only `video` and the
// shared fields are meaningful (the audio connector does not exist). Throws UsageError naming file and key.
ConnectorsConfig image_connectors_config(const nlohmann::json & j, const std::filesystem::path & file);
ConnectorsConfig image_connectors_config_from_file(const std::filesystem::path & config_json);

TensorSpecs image_connector_specs(const ConnectorsConfig & c);
void validate_image_connectors(const model::TensorFile & f, const ConnectorsConfig & c);
// "video_text_proj_in" or "text_proj_in", "video_connector" (registers), "video_connector.transformer_blocks.<i>".
std::vector<model::GroupSpec> image_connector_groups(const ConnectorsConfig & c);

struct ImageText {
    at::Tensor embeds;  // [B, L, video width]
    at::Tensor mask;    // [B, L] int64 binary (all ones with registers, as the reference returns it)
};

// LTX2ImageTextConnectors.forward(hidden [B, L, C*F] or [B, L, C, F], mask [B, L] binary, padding_side "left").
ImageText image_connectors_forward(const ConnectorsConfig & c, Weights & w, const at::Tensor & text_hidden_states,
                                   const at::Tensor & attention_mask);

}  // namespace ddo::ltx2
