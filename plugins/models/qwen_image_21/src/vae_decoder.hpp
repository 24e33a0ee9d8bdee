// AutoencoderKLQwenImage21 decoder (RGBA, z = 64, 16x) for single-frame images, with the VAE strategies of the
// preset: resident (all weights on the compute device), leaf_offload (weights stay in host memory and each
// leaf module's weights move to the device just before it runs), tiled (tile/overlap with the reference's
// linear blending). diffusers autoencoder_kl_qwenimage21.py is the reference; the layers it shares with the
// encoder are in vae_blocks.*.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint.hpp"
#include "config.hpp"
#include "vae_blocks.hpp"

namespace ddo::qwen_image_21 {

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
    uint64_t weight_bytes() const { return layers_.weight_bytes(); }
    // Leaf-module weight uploads performed so far (leaf_offload).
    uint64_t uploads() const { return layers_.uploads(); }
    // Called after each tile of a tiled decode (done, total); may throw to stop the decode (interruption).
    void set_tile_progress(std::function<void(int done, int total)> fn) { on_tile_ = std::move(fn); }
    // Called between the decoder's stages (after the mid block and each up block) with the stage's name; may throw
    // to stop the decode (interruption), so that a decode in one piece stops within one stage.
    void set_stage_check(std::function<void(const std::string & stage)> check) { stage_check_ = std::move(check); }
    // Whether the last decode() went through tiles (tiled falls back to one piece when the image fits a tile).
    bool last_decode_tiled() const { return last_tiled_; }

private:
    at::Tensor decoder(const at::Tensor & x) const;  // one frame, first_chunk

    VaeConfig config_;
    VaeStrategy strategy_;
    at::ScalarType dtype_;
    VaeTiling tiling_;
    at::Device device_;
    VaeLayers layers_;
    mutable bool last_tiled_ = false;
    std::function<void(int, int)> on_tile_;
    std::function<void(const std::string &)> stage_check_;
    std::vector<VaeStage> up_blocks_;
};

}  // namespace ddo::qwen_image_21
