// What the video DiT (transformer.cpp) and the image DiT (image_transformer.cpp) share, defined in transformer.cpp:
// the spec builders of a linear layer (`p`.weight [out, in], `p`.bias [out]) and of an LTX2AdaLayerNormSingle
// (`p`.emb.timestep_embedder.linear_1/2 and `p`.linear [n * dim]), the block prefix "transformer_blocks.<i>", the
// checkpoint's specs (globals, then block 0, 1, ...) and groups (group 0 "globals", then one per block), and
// get_mod_params.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"

#include "transformer.hpp"

namespace ddo::ltx2 {

void add_linear_spec(TensorSpecs & s, const std::string & p, int64_t out, int64_t in, bool bias = true);
void add_adaln_spec(TensorSpecs & s, const std::string & p, int64_t dim, int64_t n);
std::string dit_block_prefix(int64_t i);

// One block's (name, shape) list.
using BlockSpecs = TensorSpecs (*)(const TransformerConfig & c, int64_t block);
// `globals`, then block(c, i) for i in 0 .. num_layers-1.
TensorSpecs dit_tensor_specs(const TransformerConfig & c, TensorSpecs globals, BlockSpecs block);
// Group 0 "globals" (the names of `globals`), then "transformer_blocks.<i>" (the names of block(c, i)).
std::vector<model::GroupSpec> dit_groups(const TransformerConfig & c, const TensorSpecs & globals, BlockSpecs block);

// get_mod_params: table[None, None] + temb.reshape(B, T, n, D), unbound over n.
std::vector<at::Tensor> mod_params(const at::Tensor & table, const at::Tensor & temb, int64_t batch);

}  // namespace ddo::ltx2
