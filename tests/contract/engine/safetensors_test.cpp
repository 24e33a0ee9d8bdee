// Safetensors validation (malformed, truncated, hostile), sharded index, diffusers layout, read modes.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/store/diffusers_checkpoint.hpp"
#include "ddo/store/safetensors_file.hpp"
#include "ddo/store/weight_store.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo::store;

namespace {

fs::path tmpdir() {
    fs::path d = fs::temp_directory_path() / ("ddo_store_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

// A file with the given raw header text and `data` bytes of payload.
fs::path raw_file(const std::string & name, const std::string & header, std::size_t data, std::optional<std::uint64_t> len = {}) {
    fs::path p = tmpdir() / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    std::uint64_t n = len ? *len : header.size();
    unsigned char l[8];
    for (int i = 0; i < 8; ++i) l[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char *>(l), 8);
    out << header;
    out << std::string(data, '\x01');
    return p;
}

// Expects a RuntimeError whose message names the file and contains `what`.
void expect_invalid(const fs::path & p, const std::string & what) {
    try {
        SafetensorsFile::open(p);
        FAIL() << "accepted " << p;
    } catch (const ddo::RuntimeError & e) {
        std::string m = e.what();
        EXPECT_NE(m.find(p.string()), std::string::npos) << m;
        EXPECT_NE(m.find(what), std::string::npos) << m;
    }
}

}  // namespace

TEST(SafetensorsMalformed, TooShortForLength) {
    fs::path p = tmpdir() / "short.safetensors";
    std::ofstream(p, std::ios::binary) << "abc";
    expect_invalid(p, "shorter than the 8-byte header length");
}
TEST(SafetensorsMalformed, HeaderLengthPastEnd) { expect_invalid(raw_file("len_past.st", "{}", 0, 1000), "runs past the end"); }
TEST(SafetensorsMalformed, HeaderLengthHuge) { expect_invalid(raw_file("len_huge.st", "{}", 0, 1ull << 62), "exceeds the limit"); }
TEST(SafetensorsMalformed, NotJson) { expect_invalid(raw_file("notjson.st", "{\"a\": [1, ", 0), "not valid JSON"); }
TEST(SafetensorsMalformed, NotAnObject) { expect_invalid(raw_file("array.st", "[1,2,3]", 0), "does not start with a JSON object"); }
TEST(SafetensorsMalformed, DeepNesting) {
    std::string h = "{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
    expect_invalid(raw_file("deep.st", h, 0), "nests deeper");
}
TEST(SafetensorsMalformed, UnknownDtype) {
    expect_invalid(raw_file("dtype.st", R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", 2), "tensor 'w': unsupported dtype");
}
TEST(SafetensorsMalformed, SizeMismatch) {
    expect_invalid(raw_file("size.st", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16), "tensor 'w': shape x dtype is 16");
}
TEST(SafetensorsMalformed, OffsetsPastEndTruncated) {
    expect_invalid(raw_file("trunc.st", R"({"w":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}})", 10), "tensor 'w': data_offsets end 16 lies past");
}
TEST(SafetensorsMalformed, ReversedOffsets) {
    expect_invalid(raw_file("rev.st", R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 16), "tensor 'w': data_offsets [8, 4] are reversed");
}
TEST(SafetensorsMalformed, Overlap) {
    expect_invalid(raw_file("overlap.st", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 16),
                   "overlaps tensor 'a'");
}
// A zero-size tensor sorted between two overlapping ones must not hide their overlap.
TEST(SafetensorsMalformed, OverlapAcrossAZeroSizeTensor) {
    expect_invalid(raw_file("overlap0.st", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"U8","shape":[8],"data_offsets":[6,14]}})", 16),
                   "tensor 'b': overlaps tensor 'a'");
}
TEST(SafetensorsMalformed, NegativeDim) {
    expect_invalid(raw_file("neg.st", R"({"w":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", 4), "tensor 'w': shape holds");
}
TEST(SafetensorsMalformed, ShapeOverflow) {
    expect_invalid(raw_file("ovf.st", R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8), "overflows 64 bits");
}
TEST(SafetensorsMalformed, DuplicateTensor) {
    expect_invalid(raw_file("dup.st", R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2),
                   "tensor 'w': named twice");
}
TEST(SafetensorsMalformed, BadMetadata) {
    expect_invalid(raw_file("meta.st", R"({"__metadata__":{"k":5}})", 0), "__metadata__ entry 'k'");
}
TEST(SafetensorsMalformed, MissingOffsets) {
    expect_invalid(raw_file("nooff.st", R"({"w":{"dtype":"U8","shape":[1]}})", 1), "tensor 'w': data_offsets is not a pair");
}
TEST(SafetensorsMalformed, UnknownField) {
    expect_invalid(raw_file("field.st", R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1), "unknown field 'x'");
}

TEST(Safetensors, ValidFileAllDtypesAndMetadataAndReadModes) {
    std::vector<ddo::bench::RawTensor> ts;
    const char * dts[] = {"BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E5M2", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL"};
    const int sizes[] = {2, 2, 4, 8, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 1};
    for (int i = 0; i < 15; ++i) {
        ddo::bench::RawTensor t{std::string("t_") + dts[i], dts[i], {3, 5}, {}};
        t.bytes.resize(15 * sizes[i]);
        for (std::size_t k = 0; k < t.bytes.size(); ++k) t.bytes[k] = static_cast<unsigned char>(k * 7 + i);
        ts.push_back(t);
    }
    ts.push_back({"big", "F32", {5000}, std::vector<unsigned char>(20000)});
    for (std::size_t k = 0; k < 20000; ++k) ts.back().bytes[k] = static_cast<unsigned char>(k % 251);
    fs::path p = tmpdir() / "valid.safetensors";
    ddo::bench::write_safetensors(p, ts, {{"format", "pt"}});
    auto f = SafetensorsFile::open(p);
    EXPECT_EQ(f.tensors().size(), 16u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    for (const auto & t : ts) {
        const TensorInfo & info = f.at(t.name);
        EXPECT_EQ(info.nbytes, t.bytes.size());
        for (ReadMode m : {ReadMode::mmap, ReadMode::pread, ReadMode::direct}) {
            std::vector<unsigned char> got(info.nbytes);
            f.read_tensor(info, got.data(), m);
            EXPECT_EQ(got, t.bytes) << t.name << " " << to_string(m);
        }
    }
    EXPECT_THROW(f.at("nope"), ddo::RuntimeError);
}

// read_mode direct on a file system without O_DIRECT (tmpfs: /dev/shm refuses the open with EINVAL) falls back to
// buffered pread with the same bytes, and says how often and why; on one that takes it, nothing falls back.
TEST(Safetensors, DirectReadsThatFallBackAreCountedWithTheirReason) {
    const std::vector<unsigned char> bytes(20000, 9);
    for (const fs::path & dir : {fs::path("/dev/shm"), tmpdir()}) {
        if (!fs::is_directory(dir)) continue;
        const fs::path p = dir / ("ddo_direct_" + std::to_string(::getpid()) + ".safetensors");
        ddo::bench::write_safetensors(p, {{"w", "U8", {20000}, bytes}});
        auto f = SafetensorsFile::open(p);
        std::vector<unsigned char> got(bytes.size());
        f.read_tensor(f.at("w"), got.data(), ReadMode::direct);
        EXPECT_EQ(got, bytes);
        std::string why;
        const auto n = f.direct_fallbacks(&why);
        const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECT);
        const bool takes_direct = fd >= 0;
        if (fd >= 0) ::close(fd);
        if (takes_direct) {
            EXPECT_EQ(n, 0u) << dir;
            EXPECT_TRUE(why.empty()) << why;
        } else {
            EXPECT_EQ(n, 1u) << dir;
            EXPECT_NE(why.find("O_DIRECT"), std::string::npos) << why;
        }
        fs::remove(p);
    }
}

TEST(Safetensors, TruncatedAfterOpenIsAnErrorNotACrash) {
    fs::path p = tmpdir() / "shrink.safetensors";
    ddo::bench::write_safetensors(p, {{"w", "U8", {4096}, std::vector<unsigned char>(4096, 3)}});
    auto f = SafetensorsFile::open(p);
    fs::resize_file(p, 100);
    std::vector<unsigned char> buf(4096);
    try {
        f.read_tensor(f.at("w"), buf.data(), ReadMode::pread);
        FAIL();
    } catch (const ddo::RuntimeError & e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'w'"), std::string::npos) << e.what();
    }
}

TEST(WeightStore, ShardedIndexAndDiffusersLayout) {
    fs::path root = tmpdir() / "ckpt";
    fs::remove_all(root);
    fs::create_directories(root / "transformer");
    std::ofstream(root / "model_index.json") << R"({"_class_name":"QwenImagePipeline","_diffusers_version":"0.42.1",
        "transformer":["diffusers","QwenImageTransformer2DModel"],"vae":["diffusers","AutoencoderKLQwenImage"],"safety_checker":[null,null]})";
    std::ofstream(root / "transformer" / "config.json") << R"({"num_layers": 2})";
    ddo::bench::write_safetensors(root / "transformer" / "a.safetensors", {{"x", "U8", {4}, {1, 2, 3, 4}}});
    ddo::bench::write_safetensors(root / "transformer" / "b.safetensors", {{"y", "U8", {2}, {5, 6}}});
    std::ofstream(root / "transformer" / "diffusion_pytorch_model.safetensors.index.json")
        << R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
    auto ck = DiffusersCheckpoint::open(root);
    EXPECT_EQ(ck.pipeline_class(), "QwenImagePipeline");
    EXPECT_EQ(ck.components().size(), 2u);
    EXPECT_EQ(ck.components().at("transformer").class_name, "QwenImageTransformer2DModel");
    auto ws = ck.open_component("transformer");
    EXPECT_EQ(ws.config()["num_layers"], 2);
    EXPECT_EQ(ws.files().size(), 2u);
    std::vector<unsigned char> buf(2);
    ws.read_tensor(ws.at("y"), buf.data(), ReadMode::pread);
    EXPECT_EQ(buf, (std::vector<unsigned char>{5, 6}));
    EXPECT_THROW(ck.open_component("text_encoder"), ddo::UsageError);

    // Hostile / stale indexes.
    std::ofstream(root / "transformer" / "diffusion_pytorch_model.safetensors.index.json") << R"({"weight_map":{"x":"../a.safetensors"}})";
    EXPECT_THROW(WeightStore::open_component(root / "transformer"), ddo::RuntimeError);
    std::ofstream(root / "transformer" / "diffusion_pytorch_model.safetensors.index.json") << R"({"weight_map":{"x":"b.safetensors","y":"b.safetensors"}})";
    EXPECT_THROW(WeightStore::open_component(root / "transformer"), ddo::RuntimeError);
    std::ofstream(root / "transformer" / "diffusion_pytorch_model.safetensors.index.json") << R"({"weight_map":{"x":"missing.safetensors"}})";
    EXPECT_THROW(WeightStore::open_component(root / "transformer"), ddo::RuntimeError);
    std::ofstream(root / "model_index.json") << "{not json";
    EXPECT_THROW(DiffusersCheckpoint::open(root), ddo::RuntimeError);
}

TEST(WeightStore, PickledWeightsAreRefusedWithHowToResave) {
    // An old TorchAO (or any torch.save) component: a pickle, which ddo never loads (issue 26).
    const fs::path dir = tmpdir() / "pickled" / "transformer";
    fs::remove_all(dir.parent_path());
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << "{}";
    std::ofstream(dir / "diffusion_pytorch_model.bin") << "\x80\x02pickle";
    try {
        WeightStore::open_component(dir);
        FAIL() << "a pickled component was opened";
    } catch (const ddo::RuntimeError & e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("diffusion_pytorch_model.bin"), std::string::npos) << what;
        EXPECT_NE(what.find("safe_serialization=True"), std::string::npos) << what;
    }
    // Beside safetensors a stray pickle is not in the way.
    ddo::bench::write_safetensors(dir / "diffusion_pytorch_model.safetensors", {{"x", "U8", {1}, {7}}});
    EXPECT_EQ(WeightStore::open_component(dir).tensors().size(), 1u);
}

// Note [Component files]: a file replacing a component's weights is offered under the folder's names: the first
// prefix of kSingleFilePrefixes any tensor carries is stripped and the tensors without it (another component of a
// combined file) are not offered; the source's renames apply in order (kAtStart ones only at the start); dropped
// names are left out; config.json still comes from the folder; the bytes are the file's.
TEST(WeightStore, AReplacingFileIsOfferedUnderTheFoldersNames) {
    const fs::path dir = tmpdir() / "replaced_component";
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({"_class_name": "X", "num_layers": 1})";
    const std::string header =
        R"({"model.diffusion_model.adaln_single.linear.weight":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
        R"("model.diffusion_model.blocks.0.attn1.q_norm.weight":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
        R"("model.diffusion_model.audio_adaln_single.linear.weight":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
        R"("model.diffusion_model.video_embeddings_connector.w":{"dtype":"U8","shape":[2],"data_offsets":[6,8]},)"
        R"("vae.decoder.conv.weight":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})";
    const fs::path file = raw_file("combined.safetensors", header, 10);
    ComponentSource src(dir, file);
    src.renames = {{"q_norm", "norm_q"},
                   {std::string(1, kAtStart) + "audio_adaln_single.", "audio_time_embed."},
                   {std::string(1, kAtStart) + "adaln_single.", "time_embed."}};
    src.dropped = {"video_embeddings_connector."};
    const auto store = WeightStore::open(src);
    std::vector<std::string> names;
    for (const auto * t : store.tensors()) names.push_back(t->name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"audio_time_embed.linear.weight", "blocks.0.attn1.norm_q.weight",
                                                "time_embed.linear.weight"}));
    EXPECT_EQ(store.stripped_prefix(), "model.diffusion_model.");
    EXPECT_EQ(store.not_offered(), 2u);  // the connector (dropped) and the VAE tensor (no prefix)
    EXPECT_EQ(store.config().value("num_layers", 0), 1);
    EXPECT_EQ(store.file_path(0), file);
    EXPECT_EQ(store.offered_name("model.diffusion_model.adaln_single.linear.weight"), "time_embed.linear.weight");
    EXPECT_EQ(store.offered_name("vae.decoder.conv.weight"), std::nullopt);
    unsigned char b[2] = {};
    store.read_tensor(store.at("blocks.0.attn1.norm_q.weight"), b, ReadMode::pread);
    EXPECT_EQ(b[0], 1);

    // A file whose names carry no prefix is offered as it is; a missing file is a usage error naming it.
    const auto plain = WeightStore::open(ComponentSource(dir, raw_file("plain.safetensors",
        R"({"proj_out.weight":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2)));
    EXPECT_NE(plain.find("proj_out.weight"), nullptr);
    EXPECT_EQ(plain.stripped_prefix(), "");
    EXPECT_THROW((void)WeightStore::open(ComponentSource(dir, dir / "absent.gguf")), ddo::UsageError);
}
