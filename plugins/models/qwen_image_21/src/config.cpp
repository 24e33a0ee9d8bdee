#include "config.hpp"

#include "ddo/error.hpp"
#include "ddo/model/config_json.hpp"

namespace ddo::qwen_image_21 {

using model::read_config_key;
using model::require_config;

TransformerConfig TransformerConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    TransformerConfig c;
    read_config_key(j, "patch_size", c.patch_size, file);
    read_config_key(j, "in_channels", c.in_channels, file);
    c.out_channels = c.in_channels;
    read_config_key(j, "out_channels", c.out_channels, file);
    read_config_key(j, "num_layers", c.num_layers, file);
    read_config_key(j, "attention_head_dim", c.attention_head_dim, file);
    read_config_key(j, "num_attention_heads", c.num_attention_heads, file);
    read_config_key(j, "context_in_dim", c.context_in_dim, file);
    read_config_key(j, "mlp_ratio", c.mlp_ratio, file);
    std::vector<int64_t> axes(c.axes_dims_rope.begin(), c.axes_dims_rope.end());
    read_config_key(j, "axes_dims_rope", axes, file);
    require_config(axes.size() == 3, file, "axes_dims_rope must have 3 entries");
    for (int i = 0; i < 3; ++i) c.axes_dims_rope[i] = axes[i];
    read_config_key(j, "eps", c.eps, file);
    read_config_key(j, "causal_condition", c.causal_condition, file);
    require_config(c.patch_size == 1, file, "patch_size must be 1 for Qwen-Image 2.1 (got " + std::to_string(c.patch_size) + ")");
    require_config(c.num_layers > 0 && c.attention_head_dim > 0 && c.num_attention_heads > 0 && c.mlp_ratio > 0, file,
            "num_layers, attention_head_dim, num_attention_heads and mlp_ratio must be positive");
    require_config(axes[0] + axes[1] + axes[2] == c.attention_head_dim && axes[0] % 2 == 0 && axes[1] % 2 == 0 &&
                axes[2] % 2 == 0,
            file, "axes_dims_rope must be even and sum to attention_head_dim");
    return c;
}

VaeConfig VaeConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    VaeConfig c;
    read_config_key(j, "base_dim", c.base_dim, file);
    c.decoder_base_dim = c.base_dim;
    read_config_key(j, "decoder_base_dim", c.decoder_base_dim, file);
    read_config_key(j, "z_dim", c.z_dim, file);
    read_config_key(j, "dim_mult", c.dim_mult, file);
    read_config_key(j, "num_res_blocks", c.num_res_blocks, file);
    read_config_key(j, "temperal_downsample", c.temperal_downsample, file);
    read_config_key(j, "latents_mean", c.latents_mean, file);
    read_config_key(j, "latents_std", c.latents_std, file);
    read_config_key(j, "is_residual", c.is_residual, file);
    read_config_key(j, "in_channels", c.in_channels, file);
    read_config_key(j, "out_channels", c.out_channels, file);
    read_config_key(j, "scale_factor_spatial", c.scale_factor_spatial, file);
    auto attn = j.find("attn_scales");
    require_config(attn == j.end() || attn->is_null() || attn->empty(), file, "attn_scales is not supported (must be empty)");
    auto patch = j.find("patch_size");
    require_config(patch == j.end() || patch->is_null(), file, "patch_size is not supported (must be null)");
    require_config(c.is_residual, file, "is_residual must be true for AutoencoderKLQwenImage21");
    require_config(c.dim_mult.size() >= 2 && c.temperal_downsample.size() == c.dim_mult.size() - 1, file,
            "temperal_downsample must have one entry fewer than dim_mult");
    require_config(int64_t(c.latents_mean.size()) == c.z_dim && int64_t(c.latents_std.size()) == c.z_dim, file,
            "latents_mean and latents_std must have z_dim entries");
    return c;
}

}  // namespace ddo::qwen_image_21
