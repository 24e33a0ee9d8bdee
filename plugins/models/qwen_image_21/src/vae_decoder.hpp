// AutoencoderKLQwenImage21 decoder (RGBA, z = 64, 16x) for single-frame images, with the VAE strategies of the
// preset: resident (all weights on the compute device), leaf_offload (weights stay in host memory and each
// leaf module's weights move to the device just before it runs), tiled (tile/overlap with the reference's
// linear blending). diffusers autoencoder_kl_qwenimage21.py is the reference.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint.hpp"
#include "config.hpp"

namespace ddo::qwen_image_21 {

enum class VaeStrategy { resident, leaf_offload, tiled };

// Tile sizes in pixels (AutoencoderKLQwenImage21.enable_tiling); defaults as diffusers.
struct VaeTiling {
    int64_t tile_sample_min_height = 256, tile_sample_min_width = 256;
    int64_t tile_sample_stride_height = 192, tile_sample_stride_width = 192;
};

class VaeDecoder {
public:
    // Reads decoder + post_quant_conv weights (validated against the config: names, shapes, dtypes).
    VaeDecoder(const TensorFile & f, VaeConfig config, at::ScalarType dtype, at::Device device,
               VaeStrategy strategy, VaeTiling tiling = {});
    const VaeConfig & config() const { return config_; }
    at::ScalarType dtype() const { return dtype_; }
    // z: [B, z_dim, 1, h, w] already de-normalised. Returns [B, out_channels, 1, 16h, 16w] clamped to [-1, 1].
    at::Tensor decode(const at::Tensor & z) const;
    at::Tensor decode_plain(const at::Tensor & z) const;
    at::Tensor decode_tiled(const at::Tensor & z) const;
    // Bytes of all decoder weights (for the report).
    uint64_t weight_bytes() const;
    // Leaf-module weight uploads performed so far (leaf_offload).
    uint64_t uploads() const { return uploads_; }
    // Whether the last decode() went through tiles (tiled falls back to one piece when the image fits a tile).
    bool last_decode_tiled() const { return last_tiled_; }

private:
    at::Tensor w(const std::string & name) const;
    at::Tensor causal_conv(const at::Tensor & x, const std::string & p, int64_t pad) const;  // 5D in/out
    at::Tensor rms_norm(const at::Tensor & x, const std::string & p) const;
    at::Tensor residual_block(const at::Tensor & x, const std::string & p, bool shortcut) const;
    at::Tensor attention_block(const at::Tensor & x, const std::string & p) const;
    at::Tensor decoder(const at::Tensor & x) const;  // one frame, first_chunk

    VaeConfig config_;
    VaeStrategy strategy_;
    at::ScalarType dtype_;
    VaeTiling tiling_;
    at::Device device_;
    std::map<std::string, at::Tensor> weights_;  // on device (resident/tiled) or in host memory (leaf_offload)
    mutable uint64_t uploads_ = 0;
    mutable bool last_tiled_ = false;
    struct UpBlock {
        int64_t in_dim, out_dim;
        bool up_flag, temporal;
    };
    std::vector<UpBlock> up_blocks_;
};

}  // namespace ddo::qwen_image_21
