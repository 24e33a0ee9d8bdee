// A validated GGUF file (ddo/store/gguf_header.hpp), mapped read-only. Each tensor is offered twice:
//   - as GGUF describes it (gguf()): its GGML type and its PyTorch-order shape, which the decoders read
//     (ddo/torch/quant/ggml_dequantize.hpp);
//   - as the bytes the engine moves (tensors()): a store::TensorInfo whose dtype is the plain type (F32, F16, BF16,
//     I8..I64, F64) with the tensor's shape, or U8 of shape [stored bytes] for a block-quantized type. The planner
//     sizes groups by these bytes, so a quantized tensor is streamed at its stored size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ddo/store/gguf_header.hpp"
#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

class GgufFile {
public:
    // Maps and validates. file_index is stored in each TensorInfo. Throws RuntimeError naming the file.
    static GgufFile open(const std::filesystem::path & path, std::uint32_t file_index = 0);

    const std::filesystem::path & path() const noexcept;
    std::uint64_t file_size() const noexcept;
    const GgufHeader & header() const noexcept;
    const std::vector<TensorInfo> & tensors() const noexcept;  // stored encodings, in the header's order
    const GgufTensorInfo * gguf(std::string_view name) const noexcept;
    // The tensor's stored bytes in the mapping (lives as long as the file).
    std::span<const std::byte> bytes(const GgufTensorInfo & t) const noexcept;
    // The stored bytes of `info` (one of tensors(), under any name: WeightStore renames) in the mapping, and a copy
    // of them into dst (dst holds info.nbytes). Throws RuntimeError naming the file when they lie outside it.
    const void * mapped(const TensorInfo & info) const;
    void read_tensor(const TensorInfo & info, void * dst) const;

    GgufFile(GgufFile &&) noexcept;
    GgufFile & operator=(GgufFile &&) noexcept;
    ~GgufFile();

private:
    GgufFile();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The stored encoding of a GGUF tensor as the engine sees it (see GgufFile): plain types keep their dtype and
// shape, block-quantized ones are U8 [nbytes].
TensorInfo gguf_stored_tensor(const GgufTensorInfo & t, std::uint32_t file_index);

}  // namespace ddo::store
