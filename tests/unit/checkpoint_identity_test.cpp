// Checkpoint identity (ddo/store/checkpoint_identity.hpp): header hashes identify a checkpoint's layout, not its
// values (a changed weight value leaves them equal; a changed shape or dtype does not); --hash-weights adds a
// content hash that does see values. On safetensors files written here byte by byte.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/error.hpp"
#include "ddo/store/checkpoint_identity.hpp"

namespace fs = std::filesystem;

namespace {

// One F32 tensor "w" of `shape` with `values`; header padded to a multiple of 8 as safetensors writes it.
void write_safetensors(const fs::path & file, const std::string & dtype, const std::string & shape, const std::vector<float> & values) {
    std::string header = "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[0," +
                         std::to_string(values.size() * 4) + "]}}";
    while (header.size() % 8) header += ' ';
    std::ofstream out(file, std::ios::binary);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
    out << header;
    out.write(reinterpret_cast<const char *>(values.data()), std::streamsize(values.size() * 4));
}

class CheckpointIdentity : public ::testing::Test {
protected:
    void SetUp() override {
        dir = fs::temp_directory_path() / ("ddo_identity_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        fs::create_directories(dir / "transformer");
        std::ofstream(dir / "transformer" / "config.json") << "{\"num_layers\": 1}\n";
        std::ofstream(dir / "model_index.json") << "{\"_class_name\": \"X\"}\n";
    }
    void TearDown() override { fs::remove_all(dir); }
    std::string header_hash() {
        return ddo::store::checkpoint_identity(dir, {"transformer"})["components"]["transformer"]["files"][0]["header_xxh3_128"];
    }
    fs::path weights() const { return dir / "transformer" / "diffusion_pytorch_model.safetensors"; }
    fs::path dir;
};

}  // namespace

TEST_F(CheckpointIdentity, AValueChangeKeepsTheHeaderHashAShapeOrDtypeChangeDoesNot) {
    write_safetensors(weights(), "F32", "[2,2]", {1, 2, 3, 4});
    const std::string base = header_hash();
    EXPECT_EQ(base.size(), 32u);
    EXPECT_EQ(header_hash(), base) << "the same file twice";

    write_safetensors(weights(), "F32", "[2,2]", {1, 2, 3, 5});
    EXPECT_EQ(header_hash(), base) << "header hashes identify layout, not values";

    write_safetensors(weights(), "F32", "[4,1]", {1, 2, 3, 4});
    EXPECT_NE(header_hash(), base) << "a changed shape must change the header hash";

    write_safetensors(weights(), "I32", "[2,2]", {1, 2, 3, 4});
    EXPECT_NE(header_hash(), base) << "a changed dtype must change the header hash";
}

TEST_F(CheckpointIdentity, HashWeightsSeesValuesAndRecordsItsCost) {
    ddo::store::IdentityOptions full;
    full.hash_weights = true;
    write_safetensors(weights(), "F32", "[2,2]", {1, 2, 3, 4});
    const auto a = ddo::store::checkpoint_identity(dir, {"transformer"}, full)["components"]["transformer"];
    write_safetensors(weights(), "F32", "[2,2]", {1, 2, 3, 5});
    const auto b = ddo::store::checkpoint_identity(dir, {"transformer"}, full)["components"]["transformer"];
    EXPECT_EQ(a["files"][0]["header_xxh3_128"], b["files"][0]["header_xxh3_128"]);
    EXPECT_NE(a["files"][0]["sha256"], b["files"][0]["sha256"]);
    EXPECT_NE(a["files"][0]["xxh3_128"], b["files"][0]["xxh3_128"]);
    EXPECT_GE(a["hash_weights_s"].get<double>(), 0.0);
    const auto plain = ddo::store::checkpoint_identity(dir, {"transformer"})["components"]["transformer"];
    EXPECT_FALSE(plain["files"][0].contains("sha256"));
    EXPECT_FALSE(plain.contains("hash_weights_s"));
}

TEST_F(CheckpointIdentity, ConfigsModelIndexAndMissingComponentsAreRecorded) {
    write_safetensors(weights(), "F32", "[1]", {1});
    const auto id = ddo::store::checkpoint_identity(dir, {"transformer", "vae"});
    EXPECT_EQ(id["model_index"]["sha256"].get<std::string>().size(), 64u);
    EXPECT_EQ(id["components"]["transformer"]["config"]["file"], "config.json");
    EXPECT_EQ(id["components"]["transformer"]["folder"], "transformer");
    EXPECT_TRUE(id["components"]["vae"].is_null());
    EXPECT_NE(id["components_missing"]["vae"].get<std::string>().find("not a directory"), std::string::npos);
}

TEST_F(CheckpointIdentity, ADamagedHeaderNamesTheFile) {
    std::ofstream(weights(), std::ios::binary) << std::string("\xff\xff\xff\xff\xff\xff\xff\x00{}", 10);
    try {
        (void)ddo::store::checkpoint_identity(dir, {"transformer"});
        FAIL() << "a header length past the file must be refused";
    } catch (const ddo::RuntimeError & e) {
        EXPECT_NE(std::string(e.what()).find("diffusion_pytorch_model.safetensors"), std::string::npos) << e.what();
    }
}
