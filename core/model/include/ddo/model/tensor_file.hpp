// TensorFile: reading one checkpoint component (diffusers layout) or a single safetensors file (prompt embeddings,
// latents, fixtures) for model math through the core's validated reader (ddo/store/weight_store.hpp: header length, JSON, dtypes,
// shapes, offsets inside the data section, no overlaps, no unknown fields, string metadata). Tensors are read on
// demand (pread). Every error names the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "ddo/store/weight_encoding.hpp"
#include "ddo/store/weight_store.hpp"

namespace ddo::model {

// "[1, 64, 16]": a shape in messages.
std::string shape_str(at::IntArrayRef shape);

class TensorFile {
public:
    // A component: <dir>/diffusion_pytorch_model.safetensors, its sharded index or a *.gguf, or a single file that
    // replaces the folder's weights (store::ComponentSource; Note [Component files]).
    static TensorFile open_component(const store::ComponentSource & source);
    // One safetensors file (fixtures, prompt embeddings).
    static TensorFile open_file(const std::filesystem::path & path);

    bool contains(const std::string & name) const;
    std::vector<std::string> names() const;
    const std::map<std::string, std::string> & metadata() const { return metadata_; }
    // The file holding `name` (for messages); throws when absent.
    const std::filesystem::path & file_of(const std::string & name) const;
    std::vector<int64_t> shape_of(const std::string & name) const;
    at::ScalarType dtype_of(const std::string & name) const;
    uint64_t nbytes_of(const std::string & name) const;
    // Reads the tensor (CPU, fresh memory): a dense one as stored, a quantized one (SDNQ, TorchAO FP8, scaled FP8;
    // Note [Quantized weights]) decoded to bf16, the dtype its writers dequantize it to (GGUF: float32, as gguf-py). shape_of and dtype_of describe
    // what read gives; nbytes_of is what the file stores. Throws RuntimeError naming tensor and file.
    at::Tensor read(const std::string & name) const;
    // The tensor decoded (or cast) to `dtype`.
    at::Tensor read_as(const std::string & name, at::ScalarType dtype) const;
    // A tensor of the files by its stored name, as stored (a quantized tensor's parts: P.scale, P._weight_qdata, ...),
    // for tools and tests that look at the encoding itself.
    bool contains_stored(const std::string & stored_name) const;
    at::Tensor read_stored(const std::string & stored_name) const;
    // Whether any tensor is stored quantized, and ComponentEncodings::summary() (formats and counts, bytes).
    bool quantized() const;
    nlohmann::json quantization() const;
    // Checks a weight from the header alone: present, the expected shape, a floating dtype. Throws RuntimeError
    // naming tensor and file.
    void check(const std::string & name, at::IntArrayRef shape) const;
    // Reads a weight and checks it: present, the expected shape, a floating dtype; returns it cast to `dtype`.
    at::Tensor weight(const std::string & name, at::IntArrayRef shape, at::ScalarType dtype) const;
    // The weight file(s) read, comma-separated (for messages).
    std::string describe_files() const;
    // Whether a single file replaces the component folder's weights (--transformer FILE).
    bool replaced() const noexcept { return !replacing_.empty(); }
    // Refuses (UsageError, exit 2) a replacing file that holds tensors `known` does not name: the first few and the
    // count, with `model` ("the Qwen-Image 2.1 transformer") in the message. Nothing for a component folder.
    void require_known(const std::vector<std::string> & known, const std::string & model) const;
    // Description for messages: the directory or file.
    const std::filesystem::path & origin() const { return origin_; }

private:
    const store::EncodedTensor & entry(const std::string & name) const;

    std::filesystem::path origin_;
    std::filesystem::path replacing_;
    std::shared_ptr<const store::WeightStore> store_;  // shared: TensorFile is copyable
    std::shared_ptr<const store::ComponentEncodings> encodings_;  // borrows store_'s TensorInfo
    std::map<std::string, std::string> metadata_;
};

}  // namespace ddo::model
