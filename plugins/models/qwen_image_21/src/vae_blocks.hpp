// What the AutoencoderKLQwenImage21 encoder and decoder share (single-frame images): the VAE strategies, the
// state-dict layout of both halves and its validation, the weight holder that places weights resident or leaf by
// leaf (leaf_offload), the layers both halves are built of (causal conv, RMS norm, residual, attention and mid
// blocks) and the tile blending of tiled_encode / tiled_decode. diffusers autoencoder_kl_qwenimage21.py is the
// reference.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint.hpp"
#include "config.hpp"

namespace ddo::qwen_image_21 {

enum class VaeStrategy { resident, leaf_offload, tiled };

// Tile sizes in pixels (AutoencoderKLQwenImage21.enable_tiling); defaults as diffusers. Encoder and decoder use
// the same four numbers, as the reference does.
struct VaeTiling {
    int64_t tile_sample_min_height = 256, tile_sample_min_width = 256;
    int64_t tile_sample_stride_height = 192, tile_sample_stride_width = 192;
};

// One down block of the encoder (QwenImage21ResidualDownBlock) or up block of the decoder
// (QwenImage21ResidualUpBlock): channels, whether it resamples spatially, and whether the resample is 3-D.
struct VaeStage {
    int64_t in_dim, out_dim;
    bool resample, temporal;
};
std::vector<VaeStage> vae_down_stages(const VaeConfig & c);  // encoder.down_blocks.*
std::vector<VaeStage> vae_up_stages(const VaeConfig & c);    // decoder.up_blocks.*

// Tensor name -> shape of one half of the VAE state dict.
using VaeWeightSpec = std::map<std::string, std::vector<int64_t>>;
VaeWeightSpec vae_encoder_spec(const VaeConfig & c);  // encoder.* and quant_conv.*
VaeWeightSpec vae_decoder_spec(const VaeConfig & c);  // decoder.* and post_quant_conv.*

// Every tensor of `part` present with its shape and a floating dtype (from the header, nothing read), and no
// tensor in the file that neither half of this config has. Throws RuntimeError naming the tensor and the file.
void validate_vae_checkpoint(const TensorFile & f, const VaeConfig & c, const VaeWeightSpec & part);

// The weights of one half and the layers built from them. Resident: every weight on the compute device.
// Leaf offload: weights stay in host memory (pinned for CUDA) and each one is uploaded just before its module runs.
class VaeLayers {
public:
    // Validates (validate_vae_checkpoint) and reads the tensors of `spec`.
    VaeLayers(const TensorFile & f, const VaeConfig & c, const VaeWeightSpec & spec, at::ScalarType dtype,
              at::Device device, bool leaf_offload);

    at::Device device() const { return device_; }
    uint64_t weight_bytes() const;
    uint64_t uploads() const { return uploads_; }

    at::Tensor w(const std::string & name) const;
    // QwenImage21CausalConv3d: Conv2d on the squeezed frame after explicit zero padding. 5-D in and out.
    at::Tensor causal_conv(const at::Tensor & x, const std::string & p, int64_t pad) const;
    at::Tensor rms_norm(const at::Tensor & x, const std::string & p) const;
    at::Tensor residual_block(const at::Tensor & x, const std::string & p, bool shortcut) const;
    at::Tensor attention_block(const at::Tensor & x, const std::string & p) const;
    // QwenImage21MidBlock: resnets.0 -> attentions.0 -> resnets.1.
    at::Tensor mid_block(const at::Tensor & x, const std::string & p) const;

private:
    at::Device device_;
    bool offload_;
    std::map<std::string, at::Tensor> weights_;
    mutable uint64_t uploads_ = 0;
};

// AutoencoderKLQwenImage21.blend_v / blend_h and the stitching of tiled_encode / tiled_decode: in the
// reference's order, each tile is blended in place with the (already blended) tile above over `blend_h` rows and
// with the one to its left over `blend_w` columns; the first stride_h x stride_w of every tile are concatenated
// and the result cropped to height x width. Tiles are [B, C, T, h, w].
at::Tensor blend_tiles(std::vector<std::vector<at::Tensor>> & rows, int64_t blend_h, int64_t blend_w,
                       int64_t stride_h, int64_t stride_w, int64_t height, int64_t width);

}  // namespace ddo::qwen_image_21
