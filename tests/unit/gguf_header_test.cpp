// The GGUF header validation (ddo/store/gguf_header.hpp, issue 26): a valid file is read as gguf-py reads it (shapes
// reversed into PyTorch order, offsets after the aligned data section, metadata values), and each kind of bad file is
// refused with RuntimeError (exit 4) naming the file, the tensor or key, and what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ddo/error.hpp"
#include "ddo/store/ggml_type.hpp"
#include "ddo/store/gguf_file.hpp"
#include "ddo/store/gguf_header.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ddo::store;

// A little-endian GGUF writer for the tests (the layout of ggml's gguf.h; tools/reference/quant_fixtures.py writes
// the parity files with gguf-py itself).
struct Gguf {
    struct Tensor {
        std::string name;
        std::uint32_t type;
        std::vector<std::int64_t> ne;  // innermost first, as stored
        std::uint64_t offset;
    };
    std::uint32_t version = 3;
    std::vector<std::pair<std::string, std::string>> kv;  // key -> (u32 type + value bytes)
    std::vector<Tensor> tensors;
    std::uint64_t alignment = 32;
    std::uint64_t data_bytes = 0;  // bytes written after the header (default: every tensor's)
    std::int64_t claim_kv = -1, claim_tensors = -1;

    static std::string u32(std::uint32_t v) { return std::string(reinterpret_cast<const char *>(&v), 4); }
    static std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char *>(&v), 8); }
    static std::string str(const std::string & s) { return u64(s.size()) + s; }

    // Appends a tensor laid out after the previous one (offsets padded to the alignment).
    void add(const std::string & name, std::uint32_t type, std::vector<std::int64_t> ne) {
        std::uint64_t off = 0;
        if (!tensors.empty()) {
            const auto & p = tensors.back();
            off = p.offset + bytes_of(p);
            off = (off + alignment - 1) / alignment * alignment;
        }
        tensors.push_back({name, type, std::move(ne), off});
    }
    static std::uint64_t bytes_of(const Tensor & t) {
        const auto tt = ggml_type_traits(t.type);
        std::uint64_t n = tt ? (t.ne.empty() ? 1 : std::uint64_t(t.ne[0])) / tt->block_elems * tt->block_bytes : 0;
        for (std::size_t i = 1; i < t.ne.size(); ++i) n *= std::uint64_t(t.ne[i]);
        return n;
    }
    std::string bytes() const {
        std::string out = "GGUF" + u32(version) + u64(claim_tensors >= 0 ? claim_tensors : tensors.size()) +
                          u64(claim_kv >= 0 ? claim_kv : kv.size());
        for (const auto & [k, v] : kv) out += str(k) + v;
        for (const auto & t : tensors) {
            out += str(t.name) + u32(std::uint32_t(t.ne.size()));
            for (auto d : t.ne) out += u64(std::uint64_t(d));
            out += u32(t.type) + u64(t.offset);
        }
        out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
        std::uint64_t data = data_bytes;
        if (data == 0 && !tensors.empty()) data = tensors.back().offset + bytes_of(tensors.back());
        for (std::uint64_t i = 0; i < data; ++i) out.push_back(char(i % 251));
        return out;
    }
};

GgufHeader parse(const std::string & b, const fs::path & file = "t.gguf") {
    return parse_gguf_header({reinterpret_cast<const std::byte *>(b.data()), b.size()}, b.size(), file);
}

std::string refusal(const std::string & b) {
    try {
        parse(b, "bad.gguf");
    } catch (const ddo::RuntimeError & e) {
        return e.what();
    }
    return "(accepted)";
}

Gguf valid() {
    Gguf g;
    g.kv.push_back({"general.architecture", Gguf::u32(8) + Gguf::str("qwen_image")});
    g.kv.push_back({"ddo.count", Gguf::u32(4) + Gguf::u32(7)});
    g.add("norm.weight", 0, {3, 2});                   // F32 [2, 3]
    g.add("blk.0.attn_q.weight", 8, {64, 2});          // Q8_0 [2, 64]
    g.add("blk.0.ffn.weight", 12, {256, 1, 2});         // Q4_K [2, 1, 256]
    return g;
}

TEST(GgufHeader, AValidFileIsReadAsGgufPyReadsIt) {
    const auto g = valid();
    const auto h = parse(g.bytes());
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.alignment, 32u);
    EXPECT_EQ(h.metadata.at("general.architecture"), "qwen_image");
    EXPECT_EQ(h.metadata.at("ddo.count"), 7);
    ASSERT_EQ(h.tensors.size(), 3u);
    EXPECT_EQ(h.tensors[0].shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(h.tensors[0].nbytes, 24u);
    EXPECT_EQ(h.tensors[1].shape, (std::vector<std::int64_t>{2, 64}));
    EXPECT_EQ(h.tensors[1].nbytes, 2u * 2 * 34);
    EXPECT_EQ(h.tensors[2].shape, (std::vector<std::int64_t>{2, 1, 256}));
    EXPECT_EQ(h.tensors[2].nbytes, 2u * 144);
    EXPECT_EQ(h.data_offset % 32, 0u);
    EXPECT_EQ(h.tensors[0].file_offset, h.data_offset);
    EXPECT_EQ(h.tensors[1].file_offset, h.data_offset + 32);
}

TEST(GgufHeader, TheStoredEncodingIsWhatTheEngineMoves) {
    const auto h = parse(valid().bytes());
    const auto plain = gguf_stored_tensor(h.tensors[0], 2);
    EXPECT_EQ(plain.dtype, DType::f32);
    EXPECT_EQ(plain.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(plain.file_index, 2u);
    const auto q = gguf_stored_tensor(h.tensors[1], 0);
    EXPECT_EQ(q.dtype, DType::u8);
    EXPECT_EQ(q.shape, (std::vector<std::int64_t>{136}));
    EXPECT_EQ(q.nbytes, 136u);
    EXPECT_EQ(q.file_offset, h.tensors[1].file_offset);
}

TEST(GgufHeader, AFileIsOpenedMappedWithItsTensorsByName) {
    const fs::path p = fs::temp_directory_path() / ("ddo_gguf_" + std::to_string(::getpid()) + ".gguf");
    const auto b = valid().bytes();
    std::ofstream(p, std::ios::binary).write(b.data(), std::streamsize(b.size()));
    const auto f = GgufFile::open(p, 1);
    ASSERT_NE(f.gguf("blk.0.attn_q.weight"), nullptr);
    EXPECT_EQ(f.gguf("missing"), nullptr);
    const auto span = f.bytes(*f.gguf("blk.0.attn_q.weight"));
    EXPECT_EQ(span.size(), 136u);
    EXPECT_EQ(std::to_integer<int>(span[0]), int((32) % 251));  // data byte 32 of the writer's pattern
    EXPECT_EQ(f.tensors().size(), 3u);
    EXPECT_EQ(f.tensors()[1].file_index, 1u);
    fs::remove(p);
}

TEST(GgufHeader, ATruncatedFileIsRefusedNamingTheTensorThatEndsPastIt) {
    auto b = valid().bytes();
    b.resize(b.size() - 10);
    const auto e = refusal(b);
    EXPECT_NE(e.find("invalid GGUF file bad.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find("'blk.0.ffn.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    EXPECT_NE(e.find("re-download or re-convert"), std::string::npos) << e;
    const auto head = refusal(valid().bytes().substr(0, 200));  // inside the tensor infos
    EXPECT_NE(head.find("the header is truncated"), std::string::npos) << head;
}

TEST(GgufHeader, ARowThatIsNotAWholeNumberOfBlocksIsRefused) {
    auto g = valid();
    g.tensors[1].ne = {48, 2};  // Q8_0 rows of 48: not a multiple of 32
    const auto e = refusal(g.bytes());
    EXPECT_NE(e.find("'blk.0.attn_q.weight' (Q8_0) has rows of 48 elements, not a multiple of the type's block of 32"),
              std::string::npos) << e;
}

TEST(GgufHeader, AnUnknownGgmlTypeIsRefusedNamingItAndWhatDdoDecodes) {
    auto g = valid();
    g.tensors[0].type = 99;
    const auto e = refusal(g.bytes());
    EXPECT_NE(e.find("'norm.weight' has ggml type 99 (unknown); ddo decodes F32, F16, BF16, Q8_0"), std::string::npos) << e;
    EXPECT_FALSE(ggml_type_traits(17)->decodable);  // IQ2_XS: known by name, refused where it is decoded
    EXPECT_EQ(ggml_type_label(17), "IQ2_XS");
}

TEST(GgufHeader, BigEndianAndOldVersionsAreRefused) {
    auto g = valid();
    g.version = 0x03000000;
    EXPECT_NE(refusal(g.bytes()).find("big-endian"), std::string::npos);
    g.version = 1;
    EXPECT_NE(refusal(g.bytes()).find("version 1 (ddo reads GGUF versions 2 and 3)"), std::string::npos);
    EXPECT_NE(refusal("GGML\3\0\0\0").find("does not begin with the GGUF magic"), std::string::npos);
}

TEST(GgufHeader, MisalignedOverlappingAndDuplicateTensorsAreRefused) {
    auto g = valid();
    g.tensors[1].offset += 8;
    EXPECT_NE(refusal(g.bytes()).find("'blk.0.attn_q.weight' starts at data offset 40, not a multiple of the alignment 32"),
              std::string::npos) << refusal(g.bytes());
    g = valid();
    g.tensors[2].offset = g.tensors[1].offset;
    g.data_bytes = 2000;
    EXPECT_NE(refusal(g.bytes()).find("overlap"), std::string::npos) << refusal(g.bytes());
    g = valid();
    g.tensors[2].name = "norm.weight";
    EXPECT_NE(refusal(g.bytes()).find("tensor 'norm.weight' appears twice"), std::string::npos);
    g = valid();
    g.kv.push_back({"general.architecture", Gguf::u32(8) + Gguf::str("x")});
    EXPECT_NE(refusal(g.bytes()).find("key 'general.architecture' appears twice"), std::string::npos);
}

TEST(GgufHeader, HostileCountsDimsAndAlignmentsAreRefusedBeforeAllocating) {
    auto g = valid();
    g.claim_tensors = std::int64_t(1) << 60;
    EXPECT_NE(refusal(g.bytes()).find("more than the header holds"), std::string::npos);
    g = valid();
    g.claim_kv = -1 + (std::int64_t(1) << 40);
    EXPECT_NE(refusal(g.bytes()).find("more than the header holds"), std::string::npos);
    g = valid();
    g.tensors[0].ne = {1, 1, 1, 1, 1};
    EXPECT_NE(refusal(g.bytes()).find("has 5 dims, more than GGML's 4"), std::string::npos);
    g = valid();
    g.tensors[0].ne = {3, -2};
    EXPECT_NE(refusal(g.bytes()).find("negative dim"), std::string::npos);
    g = valid();
    g.kv.push_back({"general.alignment", Gguf::u32(4) + Gguf::u32(48)});
    EXPECT_NE(refusal(g.bytes()).find("general.alignment = 48 is not a power of two"), std::string::npos);
    g = valid();
    g.kv.push_back({"big", Gguf::u32(9) + Gguf::u32(8) + Gguf::u64(std::uint64_t(1) << 50)});
    EXPECT_NE(refusal(g.bytes()).find("key 'big' claims"), std::string::npos);
    g = valid();
    g.kv.push_back({"nested", Gguf::u32(9) + Gguf::u32(9) + Gguf::u64(1)});
    EXPECT_NE(refusal(g.bytes()).find("an array of arrays"), std::string::npos);
    g = valid();
    g.tensors[0].name = "bad\xff";
    EXPECT_NE(refusal(g.bytes()).find("is not UTF-8"), std::string::npos);
    g = valid();
    g.tensors[1].ne = {64, std::int64_t(1) << 62};
    EXPECT_NE(refusal(g.bytes()).find("overflows 64 bits"), std::string::npos) << refusal(g.bytes());
    // The fuzzer's find (tests/fuzz/gguf_header_fuzz.cpp): a row whose bytes alone wrap to 0 (2^62 F32 = 2^64), and
    // a zero dim after it, once gave an accepted tensor of 0 bytes.
    g = valid();
    g.tensors[0].ne = {std::int64_t(1) << 62, 0};
    EXPECT_NE(refusal(g.bytes()).find("'norm.weight' has a byte size that overflows 64 bits"), std::string::npos)
        << refusal(g.bytes());
}

}  // namespace
