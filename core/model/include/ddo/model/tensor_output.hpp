// Tensors written as a safetensors file (the format of --prompt-embeds and --latents): the bytes of the file for
// named tensors (copied to the CPU, contiguous, in their own dtype) and string metadata. ModelRun::write_tensors
// writes them atomically and records the output.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ddo::model {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// RuntimeError naming the tensor for a dtype safetensors has no name for (complex, quantized).
std::string encode_safetensors(const NamedTensors & tensors, const std::map<std::string, std::string> & metadata);

}  // namespace ddo::model
