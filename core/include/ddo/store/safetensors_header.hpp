// The header of a safetensors file, validated from its bytes alone: what SafetensorsFile::open reads before any
// tensor byte, kept apart from the file handling so that the same validation runs on bytes in memory (the fuzz
// target tests/fuzz/safetensors_header_fuzz.cpp). The rules are those of ddo/store/safetensors_file.hpp.
// Every violation throws ddo::RuntimeError naming the file, the tensor (when there is one) and what to do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;  // 100 MiB, as the reference reader

struct SafetensorsHeader {
    std::uint64_t data_offset = 0;              // 8 + header length
    std::vector<TensorInfo> tensors;            // sorted by file offset; file_offset is absolute
    std::map<std::string, std::string> metadata;
};

// Throws the RuntimeError of an invalid safetensors file: "invalid safetensors file <file>: <what>; <next step>".
[[noreturn]] void refuse_safetensors(const std::filesystem::path & file, const std::string & what);

// The header length N from the file's first 8 bytes (little-endian), checked against the file size: the file holds
// the 8 bytes, 2 <= N <= kSafetensorsMaxHeaderBytes and 8 + N <= file_size (prefix is not read when file_size < 8).
std::uint64_t safetensors_header_length(const unsigned char (&prefix)[8], std::uint64_t file_size,
                                        const std::filesystem::path & file);

// Validates the N header bytes (read after the 8-byte prefix) of a file of file_size bytes
// (8 + header.size() <= file_size). file_index is stored in each TensorInfo.
SafetensorsHeader parse_safetensors_header(std::string header, std::uint64_t file_size,
                                           const std::filesystem::path & file, std::uint32_t file_index = 0);

}  // namespace ddo::store
