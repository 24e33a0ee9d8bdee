// qwen_image_21 component configs, read from a diffusers checkpoint's config.json files (models.md §4).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::qwen_image_21 {

// transformer/config.json (QwenImage21Transformer2DModel).
struct TransformerConfig {
    int64_t patch_size = 1;
    int64_t in_channels = 64;
    int64_t out_channels = 64;
    int64_t num_layers = 32;
    int64_t attention_head_dim = 128;
    int64_t num_attention_heads = 32;
    int64_t context_in_dim = 4096;
    int64_t mlp_ratio = 3;
    std::array<int64_t, 3> axes_dims_rope{16, 56, 56};
    double eps = 1e-6;
    bool causal_condition = true;

    int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
    static TransformerConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    // The real Qwen-Image 2.1 transformer (diffusers defaults).
    static TransformerConfig real() { return {}; }
};

// vae/config.json (AutoencoderKLQwenImage21): both halves, encoder (vae_encoder.hpp) and decoder (vae_decoder.hpp).
struct VaeConfig {
    int64_t base_dim = 96;
    int64_t decoder_base_dim = 144;
    int64_t z_dim = 64;
    std::vector<int64_t> dim_mult{1, 2, 4, 8, 8};
    int64_t num_res_blocks = 2;
    std::vector<bool> temperal_downsample{false, true, true, true};
    std::vector<float> latents_mean;
    std::vector<float> latents_std;
    bool is_residual = true;
    int64_t in_channels = 4;
    int64_t out_channels = 4;
    int64_t scale_factor_spatial = 16;

    static VaeConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
};


}  // namespace ddo::qwen_image_21
