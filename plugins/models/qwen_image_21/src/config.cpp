#include "config.hpp"

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

template <class T>
void read(const nlohmann::json & j, const char * key, T & out, const std::filesystem::path & file) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;  // diffusers default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                           "); fix the checkpoint's config or re-export it with diffusers");
    }
}

void require(bool ok, const std::filesystem::path & file, const std::string & what) {
    if (!ok) throw RuntimeError(file.string() + ": " + what + "; fix the checkpoint's config or re-export it");
}

}  // namespace

TransformerConfig TransformerConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    TransformerConfig c;
    read(j, "patch_size", c.patch_size, file);
    read(j, "in_channels", c.in_channels, file);
    c.out_channels = c.in_channels;
    read(j, "out_channels", c.out_channels, file);
    read(j, "num_layers", c.num_layers, file);
    read(j, "attention_head_dim", c.attention_head_dim, file);
    read(j, "num_attention_heads", c.num_attention_heads, file);
    read(j, "context_in_dim", c.context_in_dim, file);
    read(j, "mlp_ratio", c.mlp_ratio, file);
    std::vector<int64_t> axes(c.axes_dims_rope.begin(), c.axes_dims_rope.end());
    read(j, "axes_dims_rope", axes, file);
    require(axes.size() == 3, file, "axes_dims_rope must have 3 entries");
    for (int i = 0; i < 3; ++i) c.axes_dims_rope[i] = axes[i];
    read(j, "eps", c.eps, file);
    read(j, "causal_condition", c.causal_condition, file);
    require(c.patch_size == 1, file, "patch_size must be 1 for Qwen-Image 2.1 (got " + std::to_string(c.patch_size) + ")");
    require(c.num_layers > 0 && c.attention_head_dim > 0 && c.num_attention_heads > 0 && c.mlp_ratio > 0, file,
            "num_layers, attention_head_dim, num_attention_heads and mlp_ratio must be positive");
    require(axes[0] + axes[1] + axes[2] == c.attention_head_dim && axes[0] % 2 == 0 && axes[1] % 2 == 0 &&
                axes[2] % 2 == 0,
            file, "axes_dims_rope must be even and sum to attention_head_dim");
    return c;
}

VaeConfig VaeConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    VaeConfig c;
    read(j, "base_dim", c.base_dim, file);
    c.decoder_base_dim = c.base_dim;
    read(j, "decoder_base_dim", c.decoder_base_dim, file);
    read(j, "z_dim", c.z_dim, file);
    read(j, "dim_mult", c.dim_mult, file);
    read(j, "num_res_blocks", c.num_res_blocks, file);
    read(j, "temperal_downsample", c.temperal_downsample, file);
    read(j, "latents_mean", c.latents_mean, file);
    read(j, "latents_std", c.latents_std, file);
    read(j, "is_residual", c.is_residual, file);
    read(j, "in_channels", c.in_channels, file);
    read(j, "out_channels", c.out_channels, file);
    read(j, "scale_factor_spatial", c.scale_factor_spatial, file);
    auto attn = j.find("attn_scales");
    require(attn == j.end() || attn->is_null() || attn->empty(), file, "attn_scales is not supported (must be empty)");
    auto patch = j.find("patch_size");
    require(patch == j.end() || patch->is_null(), file, "patch_size is not supported (must be null)");
    require(c.is_residual, file, "is_residual must be true for AutoencoderKLQwenImage21");
    require(c.dim_mult.size() >= 2 && c.temperal_downsample.size() == c.dim_mult.size() - 1, file,
            "temperal_downsample must have one entry fewer than dim_mult");
    require(int64_t(c.latents_mean.size()) == c.z_dim && int64_t(c.latents_std.size()) == c.z_dim, file,
            "latents_mean and latents_std must have z_dim entries");
    return c;
}

}  // namespace ddo::qwen_image_21
