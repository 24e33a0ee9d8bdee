// The header of a GGUF file (v2/v3, little-endian: ggml's include/gguf.h), validated from its bytes alone before any
// tensor byte is read, as safetensors_header.hpp does for safetensors; the same validation runs on bytes in memory
// (the fuzz target tests/fuzz/gguf_header_fuzz.cpp).
//
//   "GGUF" | u32 version | i64 n_tensors | i64 n_kv | n_kv x {string key, u32 type, value}
//   | n_tensors x {string name, u32 n_dims, n_dims x i64 ne, u32 ggml_type, u64 offset} | pad to alignment | data
//
// Rules: version 2 or 3 (a byte-swapped version is a big-endian file: refused); every count and string length fits
// the bytes that remain; keys and tensor names are unique; `general.alignment` (u32, default 32) is a power of two;
// n_dims <= 4, every ne >= 0; the type is one GGML defines (ddo/store/ggml_type.hpp); ne[0] is a multiple of the
// type's block size; byte size = rows x blocks per row x bytes per block, computed with overflow checks; each offset
// is a multiple of the alignment and its bytes lie inside the file; no two tensors overlap. Dims are stored innermost
// first: `shape` is PyTorch's order (reversed ne). Every violation throws ddo::RuntimeError naming the file, the
// tensor or key (when there is one) and what to do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::store {

inline constexpr std::uint64_t kGgufDefaultAlignment = 32;
inline constexpr std::uint32_t kGgufMaxDims = 4;

struct GgufTensorInfo {
    std::string name;
    std::uint32_t type = 0;               // ggml type id, one GGML defines
    std::vector<std::int64_t> shape;      // PyTorch order (outermost first): reversed ne
    std::uint64_t file_offset = 0;        // absolute offset of the first byte
    std::uint64_t nbytes = 0;             // stored bytes (blocks x bytes per block)

    std::uint64_t numel() const noexcept;
};

struct GgufHeader {
    std::uint32_t version = 0;
    std::uint64_t alignment = kGgufDefaultAlignment;
    std::uint64_t data_offset = 0;        // where the data section begins (header end padded to the alignment)
    std::vector<GgufTensorInfo> tensors;  // in the order of the file's tensor infos
    nlohmann::json metadata = nlohmann::json::object();  // key -> value (numbers, bools, strings, arrays)
};

// Throws the RuntimeError of an invalid GGUF file: "invalid GGUF file <file>: <what>; <next step>".
[[noreturn]] void refuse_gguf(const std::filesystem::path & file, const std::string & what);

// True when bytes begin with the GGUF magic.
bool is_gguf(std::span<const std::byte> bytes) noexcept;

// Validates the header at the start of `bytes` (the file's first bytes, or all of them) of a file of file_size
// bytes (bytes.size() <= file_size). A header that runs past `bytes` is refused as truncated.
GgufHeader parse_gguf_header(std::span<const std::byte> bytes, std::uint64_t file_size,
                             const std::filesystem::path & file);

}  // namespace ddo::store
