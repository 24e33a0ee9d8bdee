// A validated safetensors file. No byte of the header is trusted before validation:
//   - 8-byte little-endian header length N, 2 <= N <= kMaxHeaderBytes and 8 + N <= file size;
//   - the header is a JSON object; each entry except "__metadata__" is
//     {"dtype": <known>, "shape": [non-negative ints], "data_offsets": [begin, end]};
//   - begin <= end, 8 + N + end <= file size, product(shape) * dtype size == end - begin
//     (computed with overflow checks), and no two tensors overlap;
//   - "__metadata__", when present, maps strings to strings.
// Any violation throws ddo::RuntimeError naming the file, the tensor (when there is one) and what to do.
// The header is validated from its bytes by ddo/store/safetensors_header.hpp (also fuzzed: tests/fuzz).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddo/store/read_mode.hpp"
#include "ddo/store/safetensors_header.hpp"
#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

class SafetensorsFile {
public:
    static constexpr std::uint64_t kMaxHeaderBytes = kSafetensorsMaxHeaderBytes;  // 100 MiB, as the reference reader

    // Opens and validates. file_index is stored in each TensorInfo (for sharded checkpoints).
    static SafetensorsFile open(const std::filesystem::path & path, std::uint32_t file_index = 0);

    const std::filesystem::path & path() const noexcept;
    std::uint64_t file_size() const noexcept;
    std::uint64_t data_offset() const noexcept;  // 8 + header length
    const std::vector<TensorInfo> & tensors() const noexcept;  // sorted by file offset
    const TensorInfo * find(std::string_view name) const noexcept;
    const TensorInfo & at(std::string_view name) const;  // throws RuntimeError naming file and tensor
    const std::map<std::string, std::string> & metadata() const noexcept;

    // Reads [offset, offset + bytes) of the file into dst. direct: O_DIRECT with aligned extents;
    // falls back to pread when the file system refuses O_DIRECT (the fallback is counted).
    // Thread-safe (pread; the mapping is read-only). Throws RuntimeError naming the file.
    void read(std::uint64_t offset, std::uint64_t bytes, void * dst, ReadMode mode) const;
    // Reads one tensor's bytes into dst (dst must hold info.nbytes).
    void read_tensor(const TensorInfo & info, void * dst, ReadMode mode) const;
    // The tensor's bytes in place, in this file's read-only mapping (made once, kept for the file's life), or null
    // when the file cannot be mapped (*why says so) or shrank. Thread-safe.
    const void * mapped(const TensorInfo & info, std::string * why = nullptr) const;
    // Number of direct reads that fell back to buffered pread (file system without O_DIRECT), and (reason) why.
    std::uint64_t direct_fallbacks(std::string * reason = nullptr) const;

    SafetensorsFile(SafetensorsFile &&) noexcept;
    SafetensorsFile & operator=(SafetensorsFile &&) noexcept;
    ~SafetensorsFile();

private:
    SafetensorsFile();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::store
