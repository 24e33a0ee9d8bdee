// What the real-size structure tests (tests/e2e/*_structure_test.cpp) share: a synthetic checkpoint of the real
// tensor shapes written as a sparse safetensors file (zero bytes on disk for the payload), the byte arithmetic of
// its groups, and the engine's counters after a pass on the disk route.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"

namespace ddo::test {

// `config` written as <build>/fixtures/<name>/transformer/config.json; that folder, where the test writes its
// checkpoint and which it removes (with <name>) at the end.
inline std::filesystem::path write_transformer_config(const std::string & name, const nlohmann::json & config) {
    const auto dir = std::filesystem::path(DDO_BINARY_DIR) / "fixtures" / name / "transformer";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    return dir;
}

// The LTX-2.3 video stream's transformer values (diffusers' convert_ltx2_to_diffusers.py,
// get_ltx2_transformer_config("2.3")["diffusers_config"]) that the audio+video and the image DiT configs share, with
// num_layers = 2.
inline nlohmann::json ltx23_video_stream_config() {
    return {{"in_channels", 128},
            {"out_channels", 128},
            {"patch_size", 1},
            {"patch_size_t", 1},
            {"num_attention_heads", 32},
            {"attention_head_dim", 128},
            {"cross_attention_dim", 4096},
            {"vae_scale_factors", {8, 32, 32}},
            {"pos_embed_max_pos", 20},
            {"base_height", 2048},
            {"base_width", 2048},
            {"gated_attn", true},
            {"cross_attn_mod", true},
            {"num_layers", 2},
            {"activation_fn", "gelu-approximate"},
            {"qk_norm", "rms_norm_across_heads"},
            {"norm_elementwise_affine", false},
            {"norm_eps", 1e-6},
            {"attention_bias", true},
            {"attention_out_bias", true},
            {"rope_theta", 10000.0},
            {"rope_double_precision", true},
            {"causal_offset", 1},
            {"rope_type", "split"}};
}

// Tensor names and shapes, in file order.
using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Writes a bf16 safetensors header and extends the file to its full size without writing the payload (sparse),
// except the tensors in `filled` (borrowed; bf16, each of its spec's shape), whose bytes are written in place.
inline void write_sparse_safetensors(const std::filesystem::path & path, const TensorShapes & specs,
                                     const std::map<std::string, at::Tensor> & filled = {}) {
    nlohmann::json h = nlohmann::json::object();
    std::map<std::string, uint64_t> offset;
    uint64_t off = 0;
    for (const auto & [name, shape] : specs) {
        uint64_t n = 2;
        for (auto d : shape) n *= uint64_t(d);
        h[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
        offset[name] = off;
        off += n;
    }
    std::string header = h.dump();
    while ((header.size() + 8) % 8) header += ' ';
    const uint64_t len = header.size();
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(::write(fd, &len, 8), 8);
    ASSERT_EQ(::write(fd, header.data(), len), ssize_t(len));
    ASSERT_EQ(::ftruncate(fd, off_t(8 + len + off)), 0);
    for (const auto & [name, t] : filled) {
        ASSERT_TRUE(offset.count(name)) << name;
        const auto c = t.contiguous();
        ASSERT_EQ(c.scalar_type(), at::kBFloat16) << name;
        const auto n = ssize_t(c.numel() * 2);
        ASSERT_EQ(::pwrite(fd, c.data_ptr(), size_t(n), off_t(8 + len + offset[name])), n) << name;
    }
    ::close(fd);
}

// The bytes of `g`'s tensors as stored in `f`.
inline uint64_t stored_bytes(const model::TensorFile & f, const model::GroupSpec & g) {
    uint64_t b = 0;
    for (const auto & t : g.tensors) b += f.nbytes_of(t);
    return b;
}

inline double mib(uint64_t b) { return double(b) / double(1 << 20); }

// The engine plan's bytes of each group of `groups` (engine: the "engine" of ComponentWeights::report()), checking
// each is read from the file and is its payload in `f` plus at most the padding of its tensors.
inline std::vector<uint64_t> planned_file_group_bytes(const nlohmann::json & engine, const model::TensorFile & f,
                                                      const std::vector<model::GroupSpec> & groups) {
    const auto & planned = engine.at("plan").at("groups");
    std::vector<uint64_t> group_bytes;
    for (std::size_t g = 0; g < groups.size() && g < planned.size(); ++g) {
        EXPECT_EQ(planned[g].at("residency"), "file") << planned[g].dump();
        const uint64_t b = planned[g].at("bytes").get<uint64_t>();
        const uint64_t p = stored_bytes(f, groups[g]);
        EXPECT_GE(b, p) << groups[g].name;
        // Padding per tensor: the 256-byte slot layout + its file alignment mod 64 (host placements).
        EXPECT_LE(b, p + groups[g].tensors.size() * (256 + 64)) << groups[g].name;
        group_bytes.push_back(b);
    }
    return group_bytes;
}

// The engine's report after the whole 2-group-per-block LTX-2 DiT of 2 blocks (groups: globals, block 0, block 1)
// ran once on the disk route: two slots, prefetch depth 1 (each acquire uploads the next group in execution order,
// wrapping, into the least recently used free slot): globals (prefetch block 0), block 0 (prefetch block 1 over
// globals), block 1 (prefetch globals over block 0), finish's globals (a hit; prefetch block 0 over block 1) =
// globals, block 0, block 1, globals, block 0 read from the file, each group its payload plus the padding of its
// tensors. Prints the bytes.
inline void expect_one_pass_over_two_blocks(const model::ComponentWeights & cw, const model::TensorFile & f,
                                            const std::vector<model::GroupSpec> & groups);

// The engine's counters at the end of a phase that read `expected` bytes, all of them from the file: no owner
// outstanding, no failure.
inline void expect_file_pass(const nlohmann::json & engine, uint64_t expected) {
    EXPECT_EQ(engine.at("counters").at("bytes_moved").at("file").get<uint64_t>(), expected) << engine.dump();
    EXPECT_EQ(engine.at("counters").at("outstanding_owners"), 0);
    EXPECT_EQ(engine.at("counters").at("failures"), 0);
}

inline void expect_one_pass_over_two_blocks(const model::ComponentWeights & cw, const model::TensorFile & f,
                                            const std::vector<model::GroupSpec> & groups) {
    const auto rep = cw.report();
    const auto & engine = rep.at("engine");
    ASSERT_EQ(engine.at("plan").at("groups").size(), 3u);
    const auto group_bytes = planned_file_group_bytes(engine, f, groups);
    const uint64_t expected = 2 * group_bytes[0] + 2 * group_bytes[1] + group_bytes[2];
    EXPECT_EQ(cw.bytes_streamed(), expected);
    expect_file_pass(engine, expected);
    std::cout << "[ structure ] engine disk route: " << cw.bytes_streamed()
              << " bytes streamed from the file in one pass (globals " << group_bytes[0] << " x 2, block 0 "
              << group_bytes[1] << " x 2, block 1 " << group_bytes[2] << "; slot "
              << mib(engine.at("plan").at("slot_bytes").get<uint64_t>()) << " MiB x " << engine.at("plan").at("slots")
              << ")\n";
}

}  // namespace ddo::test
