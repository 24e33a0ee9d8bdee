// The SDNQ quantization_config reader (ddo/store/sdnq_config.hpp, issue 26): sdnq 0.2.8's per-layer rules (module
// name patterns, quantized-matmul eligibility and the transposed layouts it implies, the Hadamard group), and the
// refusal of what ddo does not decode, naming the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/store/sdnq_config.hpp"

namespace {

using namespace ddo::store;

nlohmann::json base() { return {{"quant_method", "sdnq"}, {"weights_dtype", "int8"}, {"sdnq_version", "0.2.8"}}; }

TEST(SdnqConfig, NamePatternsMatchAsSdnqsCheckParamNameIn) {
    const std::string n = "transformer_blocks.3.attn.to_q";
    EXPECT_TRUE(sdnq_name_matches(n, {n}));
    EXPECT_TRUE(sdnq_name_matches(n, {"to_q"}));                  // one dot-separated part
    EXPECT_TRUE(sdnq_name_matches(n, {"attn"}));
    EXPECT_FALSE(sdnq_name_matches(n, {"to"}));
    EXPECT_TRUE(sdnq_name_matches(n, {".transformer_blocks"}));   // leading dot: a prefix of the name
    EXPECT_FALSE(sdnq_name_matches(n, {".attn"}));
    EXPECT_TRUE(sdnq_name_matches(n, {"transformer_blocks.*.to_q"}));  // glob, matched at the start
    EXPECT_FALSE(sdnq_name_matches(n, {"*.to_k"}));
    EXPECT_FALSE(sdnq_name_matches(n, {}));
}

TEST(SdnqConfig, QuantizedMatmulLayersStore8BitWeightsTransposedAndNeverPackedOrGroupedOnes) {
    auto qc = base();
    qc["use_quantized_matmul"] = true;
    qc["modules_to_not_use_matmul"] = {"proj_out"};
    const auto c = SdnqConfig::from_json(qc, "q.json");
    auto r = c.layer("blocks.0.to_q", 256, 512, false);
    EXPECT_TRUE(r.quantized_matmul);
    EXPECT_TRUE(r.transposed);
    EXPECT_FALSE(c.layer("blocks.0.to_q", 256, 512, true).transposed);  // grouped: re-quantized for the matmul
    EXPECT_FALSE(c.layer("proj_out", 256, 512, false).quantized_matmul);
    EXPECT_FALSE(c.layer("x", 24, 512, false).quantized_matmul);       // out < 32
    EXPECT_FALSE(c.layer("x", 256, 520, false).quantized_matmul);      // in % 16 != 0
    qc["weights_dtype"] = "uint4";
    r = SdnqConfig::from_json(qc, "q.json").layer("x", 256, 512, false);
    EXPECT_TRUE(r.quantized_matmul);   // the SVD factors are stored transposed
    EXPECT_FALSE(r.transposed);        // a packed weight never is
    EXPECT_TRUE(r.dtype.packed && r.dtype.is_unsigned && r.dtype.bits == 4);
}

TEST(SdnqConfig, PerModuleDtypesAndTheHadamardGroupFollowSdnq) {
    auto qc = base();
    qc["modules_dtype_dict"] = {{"uint4", {"c"}}, {"float8_e4m3fn", {".b"}}};
    qc["use_hadamard"] = true;
    const auto c = SdnqConfig::from_json(qc, "q.json");
    EXPECT_EQ(c.dtype_of("a").name, "int8");
    EXPECT_EQ(c.dtype_of("c").name, "uint4");
    EXPECT_EQ(c.dtype_of("b").name, "float8_e4m3fn");
    EXPECT_EQ(c.layer("a", 256, 512, false).hadamard_group, 256);
    EXPECT_EQ(c.layer("c", 256, 96, false).hadamard_group, 32);   // 128 halved until it divides 96
    EXPECT_EQ(c.layer("c", 256, 6, false).hadamard_group, 0);     // 2 < 4: no rotation
    EXPECT_TRUE(c.layer("a", 256, 512, false).fp32);
}

TEST(SdnqConfig, WhatDdoDoesNotDecodeIsRefusedNamingTheKey) {
    auto qc = base();
    qc["weights_dtype"] = "uint2";
    try {
        SdnqConfig::from_json(qc, "t/quantization_config.json");
        FAIL() << "accepted uint2";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find("t/quantization_config.json: quantization_config.weights_dtype = \"uint2\""),
                          std::string::npos) << e.what();
    }
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"use_codebook", true}, {"zero_point_dtype", "uint8"}, {"modules_quant_config", {{"a", {{"group_size", 32}}}}}}) {
        auto bad = base();
        bad[key] = value;
        EXPECT_THROW(SdnqConfig::from_json(bad, "q.json"), ddo::UsageError) << key;
    }
    auto ok = base();
    ok["use_codebook"] = false;
    ok["scale_dtype"] = nullptr;
    ok["zero_point_dtype"] = "none";
    ok["modules_quant_config"] = nlohmann::json::object();
    EXPECT_NO_THROW(SdnqConfig::from_json(ok, "q.json"));
    auto other = base();
    other["quant_method"] = "torchao";
    EXPECT_THROW(SdnqConfig::from_json(other, "q.json"), ddo::UsageError);
}

TEST(SdnqConfig, TheDenseShapeComesFromTheStoredShapesOrIsRefusedNamingTheLayer) {
    const SdnqDtype int8 = sdnq_dtype("int8", "t"), uint4 = sdnq_dtype("uint4", "t");
    EXPECT_EQ(sdnq_dense_shape({6, 10}, {6, 1}, int8, "l"), std::make_pair(std::int64_t(6), std::int64_t(10)));
    EXPECT_EQ(sdnq_dense_shape({10, 6}, {1, 6}, int8, "l"), std::make_pair(std::int64_t(6), std::int64_t(10)));  // transposed
    EXPECT_EQ(sdnq_dense_shape({6, 2, 5}, {6, 2, 1}, int8, "l"), std::make_pair(std::int64_t(6), std::int64_t(10)));
    EXPECT_EQ(sdnq_dense_shape({30}, {6, 1}, uint4, "l"), std::make_pair(std::int64_t(6), std::int64_t(10)));  // 2 a byte
    try {
        sdnq_dense_shape({31}, {6, 1}, uint4, "blocks.0.attn.to_q");
        FAIL() << "a packed weight that does not divide into the scale's rows was accepted";
    } catch (const ddo::RuntimeError & e) {
        EXPECT_NE(std::string(e.what()).find("blocks.0.attn.to_q"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("re-save"), std::string::npos) << e.what();
    }
    EXPECT_THROW(sdnq_dense_shape({6, 10}, {6, 1}, uint4, "l"), ddo::RuntimeError);   // packed must be 1-D
    EXPECT_THROW(sdnq_dense_shape({2, 3, 4, 5}, {2, 1}, int8, "l"), ddo::RuntimeError);  // not a Linear's
}

}  // namespace
