// Fuzz target: the safetensors header validation (ddo/store/safetensors_header.hpp), which SafetensorsFile::open runs
// on every checkpoint file before any tensor byte is read. The input is a safetensors file's bytes; two passes:
//   1. as a whole file: the 8-byte length prefix against the input's size, then the header bytes it spans (what
//      SafetensorsFile::open reads);
//   2. the bytes after the prefix as the whole header, with the prefix read as the size of the data section: a
//      mutation that grows or shrinks the JSON stays a header, and the offset bounds see any data size up to 2^64.
// An accepted header must describe tensors that lie inside the data section (no offset wrap), whose byte size is
// shape x dtype (no overflow), sorted by offset and not overlapping: checked here on every accepted input.
#include <algorithm>
#include <cstring>

#include "ddo/store/dtype.hpp"
#include "ddo/store/safetensors_header.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace ddo::store;

void check(const SafetensorsHeader & h, std::uint64_t header_bytes, std::uint64_t file_size, std::uint32_t file_index) {
    DDO_FUZZ_CHECK(h.data_offset == 8 + header_bytes);
    DDO_FUZZ_CHECK(h.data_offset <= file_size);
    std::uint64_t reach = h.data_offset;  // furthest end of a non-empty tensor so far
    std::uint64_t last_offset = 0;
    for (const TensorInfo & t : h.tensors) {
        DDO_FUZZ_CHECK(t.name != "__metadata__");
        DDO_FUZZ_CHECK(t.file_index == file_index);
        DDO_FUZZ_CHECK(t.file_offset >= h.data_offset);
        DDO_FUZZ_CHECK(t.file_offset <= file_size && t.nbytes <= file_size - t.file_offset);
        DDO_FUZZ_CHECK(t.file_offset >= last_offset);
        last_offset = t.file_offset;
        unsigned __int128 bytes = dtype_size(t.dtype);
        for (const std::int64_t d : t.shape) {
            DDO_FUZZ_CHECK(d >= 0);
            bytes *= static_cast<std::uint64_t>(d);
            if (bytes > UINT64_MAX) bytes = static_cast<unsigned __int128>(UINT64_MAX) + 1;  // saturate
        }
        DDO_FUZZ_CHECK(bytes == t.nbytes);
        DDO_FUZZ_CHECK(t.numel() * dtype_size(t.dtype) == t.nbytes);
        if (t.nbytes == 0) continue;
        DDO_FUZZ_CHECK(t.file_offset >= reach);  // no overlap with any earlier non-empty tensor
        reach = t.file_offset + t.nbytes;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    using ddo::fuzz::accepted;
    const std::filesystem::path file = "fuzz.safetensors";
    unsigned char prefix[8] = {};
    std::memcpy(prefix, data, std::min<std::size_t>(size, 8));

    // 1. The file as SafetensorsFile::open reads it.
    accepted([&] {
        const std::uint64_t n = safetensors_header_length(prefix, size, file);
        DDO_FUZZ_CHECK(n >= 2 && n <= size - 8);
        const std::string header(reinterpret_cast<const char *>(data) + 8, static_cast<std::size_t>(n));
        check(parse_safetensors_header(header, size, file), n, size, 0);
    });
    if (size < 8) return 0;

    // 2. Everything after the prefix is the header; the prefix is the data section's size.
    std::uint64_t data_size = 0;
    for (int i = 7; i >= 0; --i) data_size = (data_size << 8) | prefix[i];
    const std::uint64_t header_bytes = size - 8;
    std::uint64_t file_size = 0;
    if (__builtin_add_overflow(8 + header_bytes, data_size, &file_size)) return 0;
    accepted([&] {
        const std::string header(reinterpret_cast<const char *>(data) + 8, static_cast<std::size_t>(header_bytes));
        check(parse_safetensors_header(header, file_size, file, 3), header_bytes, file_size, 3);
    });
    return 0;
}
