// AutoencoderKLQwenImage21 encoder (RGBA in, z = 64, 16x) for single-frame images, with the decoder's strategies:
// resident, leaf_offload (each leaf module's weights uploaded just before it runs) and tiled (tiled_encode: pixel
// tiles encoded separately, latents blended). encode() returns latent_dist.mode() (the mean half of the
// quant_conv moments); encode_normalized() also applies the pipeline's image-conditioning normalisation.
// diffusers autoencoder_kl_qwenimage21.py is the reference; the shared layers are in vae_blocks.*.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint.hpp"
#include "config.hpp"
#include "vae_blocks.hpp"

namespace ddo::qwen_image_21 {

class VaeEncoder {
public:
    // Reads encoder + quant_conv weights (validated against the config: names, shapes, dtypes).
    VaeEncoder(const TensorFile & f, VaeConfig config, at::ScalarType dtype, at::Device device,
               VaeStrategy strategy, VaeTiling tiling = {});
    const VaeConfig & config() const { return config_; }
    at::ScalarType dtype() const { return dtype_; }
    // pixels: [B, in_channels, 1, H, W] in [-1, 1], H and W multiples of 16. Returns the latent mean
    // [B, z_dim, 1, H/16, W/16] (AutoencoderKLQwenImage21.encode(x).latent_dist.mode()). The tiled strategy
    // tiles only when the image is larger than a tile, as the reference does.
    at::Tensor encode(const at::Tensor & pixels) const;
    at::Tensor encode_plain(const at::Tensor & pixels) const;
    at::Tensor encode_tiled(const at::Tensor & pixels) const;
    // encode() then (mode - latents_mean) / latents_std, as QwenImage21Pipeline._encode_vae_image does for
    // condition images (retrieve_latents with sample_mode="argmax").
    at::Tensor encode_normalized(const at::Tensor & pixels) const;
    uint64_t weight_bytes() const { return layers_.weight_bytes(); }
    uint64_t uploads() const { return layers_.uploads(); }
    // Whether the last encode() went through tiles.
    bool last_encode_tiled() const { return last_tiled_; }

private:
    at::Tensor check_input(const at::Tensor & pixels) const;  // on the device, in dtype
    at::Tensor encoder(const at::Tensor & x) const;  // one frame -> quant_conv moments [B, 2 z_dim, 1, h, w]
    at::Tensor mode(const at::Tensor & moments) const;

    VaeConfig config_;
    VaeStrategy strategy_;
    at::ScalarType dtype_;
    VaeTiling tiling_;
    at::Device device_;
    VaeLayers layers_;
    mutable bool last_tiled_ = false;
    std::vector<VaeStage> down_blocks_;
};

// (latents - latents_mean) / latents_std with the config's 64 values (QwenImage21Pipeline._encode_vae_image).
at::Tensor normalize_image_latents(const VaeConfig & c, const at::Tensor & latents);

}  // namespace ddo::qwen_image_21
