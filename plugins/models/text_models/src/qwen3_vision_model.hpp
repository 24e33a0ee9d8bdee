// The Qwen3-VL vision tower (transformers 5.24 Qwen3VLVisionModel, models/qwen3_vl/modeling_qwen3_vl.py, and the
// grid helpers of vision_utils.py): Conv3d patch embed -> learned position table resampled bilinearly to each
// image's grid (get_vision_interpolation_indices_and_weights, align_corners, in the merge-block patch order) ->
// blocks (LayerNorm, full attention within each frame with the 2-D axial rotary of get_vision_position_ids,
// gelu_pytorch_tanh MLP) -> the merger (LayerNorm, then the 2 x 2 shuffle, GELU MLP) and the deepstack mergers
// (shuffle, then LayerNorm; use_postshuffle_norm) on the outputs of the blocks deepstack_visual_indexes names.
// What the reference returns as pooler_output and deepstack_features (BaseModelOutputWithDeepstackFeatures).
//
// The weights are execution groups of one model-kit component (like the text tower, qwen3_text_model.hpp), so
// every route and the planner apply to it: group 0 "patch_embed" (patch_embed.proj + pos_embed), group 1 + i
// "blocks.<i>", the last group "merger" (merger + every deepstack_merger_list entry: the deepstack blocks' outputs
// are kept until the end, [patches, hidden] each, and merged there).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"

namespace ddo::text {

struct Qwen3VisionConfig {
    std::int64_t depth = 0, hidden_size = 0, num_heads = 0, intermediate_size = 0, patch_size = 0,
                 temporal_patch_size = 0, spatial_merge_size = 0, out_hidden_size = 0, num_position_embeddings = 0,
                 in_channels = 3;
    std::vector<std::int64_t> deepstack_visual_indexes;
    std::string hidden_act;     // gelu_pytorch_tanh (the only one implemented; from_file refuses others)
    double rope_theta = 10000;  // rope_parameters.rope_theta (rope_type axial)
    std::string weight_prefix;  // e.g. "model.visual." (from the checkpoint's names, qwen3_vision_groups)

    // vision_config of a Qwen3VLForConditionalGeneration config.json. UsageError naming the file and key for a
    // missing key or a value this tower does not implement (hidden_act other than gelu_pytorch_tanh, rope_type
    // other than axial, a head size not a multiple of 4, a deepstack index outside the blocks).
    static Qwen3VisionConfig from_file(const std::filesystem::path & config_json);

    std::int64_t head_dim() const { return hidden_size / num_heads; }
    // int(num_position_embeddings ** 0.5): the side of the square position table (its rows past side^2 are unused).
    std::int64_t grid_per_side() const;
};

// The execution groups in checkpoint names (see the top of this file): 0 "patch_embed", 1 + i "blocks.<i>", the
// last "merger". Sets c.weight_prefix from `tensor_names` (the first of model.visual. / visual. / none holding
// patch_embed.proj.weight; RuntimeError naming them when none does).
std::vector<model::GroupSpec> qwen3_vision_groups(Qwen3VisionConfig & c, const std::vector<std::string> & tensor_names);

// Checks every tensor of the tower from the header alone: present, the shape the config gives, floating.
// RuntimeError naming the tensor and the file (TensorFile::check). Call after qwen3_vision_groups.
void qwen3_vision_check_weights(const model::TensorFile & f, const Qwen3VisionConfig & c);

struct VisionFeatures {
    at::Tensor embeds;                  // [sum over images of t*h*w / merge^2, out_hidden_size]: the merger's output
    std::vector<at::Tensor> deepstack;  // one per deepstack_visual_indexes entry, same shape, in block order
};

struct VisionTowerCallbacks {
    std::function<void(int block, int total)> on_block;  // after each block (block = 1 .. depth)
    std::function<void(int block)> check_interrupted;    // before each block: throws to stop
};

// pixel_values [N_patches, in_channels * temporal_patch_size * patch_size^2] (the Qwen2-VL processor's layout:
// images after one another, each in merge-block order), grid_thw one (t, h, w) per image in patches (h and w
// multiples of spatial_merge_size, sum of t*h*w = N_patches; UsageError naming what does not fit). Weights are
// acquired and released group by group. Outputs in `dtype` on `device`.
VisionFeatures qwen3_vision_forward(model::ComponentWeights & weights, const Qwen3VisionConfig & c,
                                    const at::Tensor & pixel_values,
                                    const std::vector<std::array<std::int64_t, 3>> & grid_thw, at::ScalarType dtype,
                                    at::Device device, const VisionTowerCallbacks & cb = {});

}  // namespace ddo::text
