// Fuzz target: the GGUF header validation (ddo/store/gguf_header.hpp), which GgufFile::open runs on every GGUF file
// before any tensor byte is read. The input is a GGUF file's bytes; two passes:
//   1. as a whole file (what GgufFile::open parses from its mapping);
//   2. as the head of a larger file (file size = input + 1 MiB): the header must still lie inside the input, and the
//      offset bounds see a data section the input does not hold.
// An accepted header must describe tensors inside the file, aligned, not overlapping, whose byte size is the type's
// blocks x bytes per block: checked here on every accepted input.
#include <algorithm>

#include "ddo/store/ggml_type.hpp"
#include "ddo/store/gguf_header.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace ddo::store;

void check(const GgufHeader & h, std::uint64_t file_size) {
    DDO_FUZZ_CHECK(h.alignment != 0 && (h.alignment & (h.alignment - 1)) == 0);
    DDO_FUZZ_CHECK(h.data_offset % h.alignment == 0 && h.data_offset <= file_size);
    std::vector<const GgufTensorInfo *> sorted;
    for (const auto & t : h.tensors) {
        const auto tt = ggml_type_traits(t.type);
        DDO_FUZZ_CHECK(tt.has_value());
        DDO_FUZZ_CHECK(t.shape.size() <= kGgufMaxDims);
        unsigned __int128 bytes = tt->block_bytes;
        const std::uint64_t row = t.shape.empty() ? 1 : std::uint64_t(t.shape.back());
        DDO_FUZZ_CHECK(row % tt->block_elems == 0);
        bytes *= row / tt->block_elems;
        for (std::size_t i = 0; i + 1 < t.shape.size(); ++i) bytes *= std::uint64_t(t.shape[i]);
        DDO_FUZZ_CHECK(bytes == t.nbytes);
        DDO_FUZZ_CHECK(t.file_offset >= h.data_offset && (t.file_offset - h.data_offset) % h.alignment == 0);
        DDO_FUZZ_CHECK(t.file_offset <= file_size && t.nbytes <= file_size - t.file_offset);
        sorted.push_back(&t);
    }
    std::sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->file_offset < b->file_offset; });
    std::uint64_t reach = 0;
    for (const auto * t : sorted) {
        if (t->nbytes == 0) continue;
        DDO_FUZZ_CHECK(t->file_offset >= reach);
        reach = t->file_offset + t->nbytes;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    using ddo::fuzz::accepted;
    const std::filesystem::path file = "fuzz.gguf";
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte *>(data), size);
    accepted([&] { check(parse_gguf_header(bytes, size, file), size); });
    accepted([&] { check(parse_gguf_header(bytes, size + (1u << 20), file), size + (1u << 20)); });
    return 0;
}
