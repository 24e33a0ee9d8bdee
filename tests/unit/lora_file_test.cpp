// The LoRA reader (ddo/store/lora_file.hpp, issue 27): every key family into one canonical form (module, A, B,
// alpha, rank), the scale rule, matching against a model's modules (kohya's flattened names, a rename table), and
// the refusals naming file and key. Files are written here with the key spellings of each family
// (../shared/research/quantization-lora.md §6); the pipelines' LoRA parity against diffusers comes with the runtime.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "ddo/error.hpp"
#include "ddo/store/lora_file.hpp"
#include "synthetic_model.hpp"

namespace {

namespace fs = std::filesystem;
using ddo::bench::RawTensor;
using namespace ddo::store;

fs::path tmp(const std::string & name) {
    const auto d = fs::temp_directory_path() / ("ddo_lora_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d / name;
}

RawTensor f32(const std::string & name, std::vector<std::int64_t> shape, float fill = 0.5f) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<unsigned char> b(std::size_t(n) * 4);
    for (std::int64_t i = 0; i < n; ++i) std::memcpy(b.data() + i * 4, &fill, 4);
    return {name, "F32", std::move(shape), std::move(b)};
}

RawTensor bf16_scalar(const std::string & name, float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return {name, "BF16", {}, {static_cast<unsigned char>(bits >> 16), static_cast<unsigned char>(bits >> 24)}};
}

// A Qwen-like transformer's modules: [out, in] weights.
const std::map<std::string, std::vector<std::int64_t>> kModules = {
    {"transformer_blocks.0.attn.to_q", {64, 32}},
    {"transformer_blocks.0.attn.add_q_proj", {64, 32}},
    {"transformer_blocks.0.img_mlp.net.0.proj", {128, 32}},
    {"proj_out", {16, 64}},
};

TEST(LoraFile, DiffusersPeftKeysWithoutAlphaScaleByStrength) {
    const auto p = tmp("peft.safetensors");
    ddo::bench::write_safetensors(p, {f32("transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {4, 32}),
                                      f32("transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {64, 4}),
                                      f32("transformer.proj_out.lora_A.weight", {4, 64}),
                                      f32("transformer.proj_out.lora_B.weight", {16, 4})});
    const auto f = LoraFile::open(p);
    EXPECT_EQ(f.format(), "diffusers/PEFT");
    ASSERT_EQ(f.layers().size(), 2u);
    for (const auto & l : f.layers()) {
        EXPECT_EQ(l.component, "transformer");
        EXPECT_EQ(l.rank, 4);
        EXPECT_FALSE(l.alpha);
        EXPECT_DOUBLE_EQ(l.scale(0.7), 0.7);
    }
    const auto m = match_lora(f, "transformer", false, kModules);
    EXPECT_EQ(m.matched.size(), 2u);
    EXPECT_TRUE(m.unmatched.empty());
    EXPECT_EQ(match_lora(f, "text_encoder", false, kModules).matched.size(), 0u);  // another component's layers
}

TEST(LoraFile, KohyaFlattenedNamesWithAlphaResolveAgainstTheModelsModules) {
    const auto p = tmp("kohya.safetensors");
    ddo::bench::write_safetensors(p, {f32("lora_unet_transformer_blocks_0_attn_add_q_proj.lora_down.weight", {8, 32}),
                                      f32("lora_unet_transformer_blocks_0_attn_add_q_proj.lora_up.weight", {64, 8}),
                                      bf16_scalar("lora_unet_transformer_blocks_0_attn_add_q_proj.alpha", 4.0f),
                                      f32("lora_unet_transformer_blocks_0_img_mlp_net_0_proj.lora_down.weight", {8, 32}),
                                      f32("lora_unet_transformer_blocks_0_img_mlp_net_0_proj.lora_up.weight", {128, 8})});
    const auto f = LoraFile::open(p);
    EXPECT_EQ(f.format(), "kohya");
    const auto m = match_lora(f, "transformer", false, kModules);
    ASSERT_EQ(m.matched.size(), 2u);
    std::map<std::string, const LoraLayer *> by;
    for (const auto & [l, target] : m.matched) by[target] = l;
    ASSERT_TRUE(by.count("transformer_blocks.0.attn.add_q_proj"));  // "add_q_proj" survives the un-flattening
    EXPECT_DOUBLE_EQ(*by["transformer_blocks.0.attn.add_q_proj"]->alpha, 4.0);
    EXPECT_DOUBLE_EQ(by["transformer_blocks.0.attn.add_q_proj"]->scale(1.3), 1.3 * 4.0 / 8.0);
    EXPECT_DOUBLE_EQ(by.at("transformer_blocks.0.img_mlp.net.0.proj")->scale(1.3), 1.3);  // no alpha: strength
}

TEST(LoraFile, ComfyPrefixPeftInfixAndTheFilesAdapterMetadataAlpha) {
    const auto p = tmp("comfy.safetensors");
    ddo::bench::write_safetensors(p, {f32("diffusion_model.transformer_blocks.0.attn.to_q.lora_A.default.weight", {4, 32}),
                                      f32("diffusion_model.transformer_blocks.0.attn.to_q.lora_B.default.weight", {64, 4})},
                                  {{"lora_adapter_metadata", R"({"r": 4, "lora_alpha": 8, "use_rslora": false})"}});
    const auto f = LoraFile::open(p);
    EXPECT_EQ(f.format(), "ComfyUI");
    ASSERT_EQ(f.layers().size(), 1u);
    EXPECT_DOUBLE_EQ(f.layers()[0].scale(1.0), 2.0);  // lora_alpha / r from peft's LoraConfig
    EXPECT_EQ(match_lora(f, "transformer", false, kModules).matched.at(0).second, "transformer_blocks.0.attn.to_q");
}

// diffusers' save_lora_weights packs each component's LoraConfig under its prefix (_pack_dict_with_prefix):
// "transformer.lora_alpha". Read as the bare key was, lora_a of the qwen fixtures got scale 1 where diffusers uses 2.
TEST(LoraFile, DiffusersPrefixedAdapterMetadataGivesEachComponentItsAlpha) {
    const auto p = tmp("prefixed.safetensors");
    ddo::bench::write_safetensors(p, {f32("transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {4, 32}),
                                      f32("transformer.transformer_blocks.0.attn.to_q.lora_B.weight", {64, 4}),
                                      f32("text_encoder.layers.0.q.lora_A.weight", {4, 32}),
                                      f32("text_encoder.layers.0.q.lora_B.weight", {64, 4})},
                                  {{"lora_adapter_metadata", R"({"transformer.r": 4, "transformer.lora_alpha": 8,
                                                                 "transformer.use_rslora": false,
                                                                 "text_encoder.r": 4, "text_encoder.lora_alpha": 4,
                                                                 "text_encoder.use_rslora": true})"}});
    const auto f = LoraFile::open(p);
    ASSERT_EQ(f.layers().size(), 2u);
    for (const auto & l : f.layers()) {
        if (l.component == "transformer") EXPECT_DOUBLE_EQ(l.scale(0.7), 0.7 * 8.0 / 4.0);
        else EXPECT_DOUBLE_EQ(l.scale(1.0), 4.0 / 2.0);  // rslora: alpha / sqrt(rank)
    }
}

TEST(LoraFile, BareKeysBelongToTheComponentTheUserNamesAndARenameTableIsTried) {
    const auto p = tmp("bare.safetensors");
    ddo::bench::write_safetensors(p, {f32("blocks.0.q.lora_A.weight", {2, 32}), f32("blocks.0.q.lora_B.weight", {64, 2}),
                                      f32("nowhere.lora_A.weight", {2, 32}), f32("nowhere.lora_B.weight", {64, 2})});
    const auto f = LoraFile::open(p);
    EXPECT_EQ(match_lora(f, "transformer", false, kModules).matched.size() +
                  match_lora(f, "transformer", false, kModules).unmatched.size(), 0u);  // bare: not transformer's unless said
    const auto m = match_lora(f, "transformer", true, kModules, [](std::string_view n) -> std::optional<std::string> {
        if (n == "blocks.0.q") return "transformer_blocks.0.attn.to_q";
        return std::nullopt;
    });
    ASSERT_EQ(m.matched.size(), 1u);
    EXPECT_EQ(m.matched[0].second, "transformer_blocks.0.attn.to_q");
    EXPECT_EQ(m.unmatched, std::vector<std::string>{"nowhere"});
    EXPECT_EQ(m.describe("transformer"), "1 of 2 modules match nothing in transformer (first: nowhere); 1 matched");
}

TEST(LoraFile, AFactorThatDoesNotFitItsModuleIsARuntimeErrorNamingModuleFileAndShapes) {
    const auto p = tmp("wrong.safetensors");
    ddo::bench::write_safetensors(p, {f32("transformer.proj_out.lora_A.weight", {4, 48}),
                                      f32("transformer.proj_out.lora_B.weight", {16, 4})});
    const auto f = LoraFile::open(p);
    try {
        match_lora(f, "transformer", false, kModules);
        FAIL() << "a [4, 48] A for a [16, 64] weight was accepted";
    } catch (const ddo::RuntimeError & e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("proj_out"), std::string::npos) << w;
        EXPECT_NE(w.find("wrong.safetensors"), std::string::npos) << w;
        EXPECT_NE(w.find("[16, 64]"), std::string::npos) << w;
        EXPECT_NE(w.find("A [4, 48]"), std::string::npos) << w;
    }
}

TEST(LoraFile, WhatIsNotAPlainLoraIsRefusedNamingTheKey) {
    const auto refused = [](const std::string & name, const std::vector<RawTensor> & ts,
                            const std::vector<std::pair<std::string, std::string>> & meta, const std::string & says) {
        const auto p = tmp(name);
        ddo::bench::write_safetensors(p, ts, meta);
        try {
            LoraFile::open(p);
            ADD_FAILURE() << name << " was accepted";
        } catch (const ddo::UsageError & e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << name << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    };
    refused("loha.safetensors", {f32("lycoris_blocks_0.hada_w1_a", {4, 32})}, {}, "LoHa");
    refused("lokr.safetensors", {f32("lycoris_blocks_0.lokr_w1", {4, 4})}, {}, "LoKr");
    refused("dora.safetensors", {f32("transformer.proj_out.lora_A.weight", {4, 64}), f32("transformer.proj_out.lora_B.weight", {16, 4}),
                                 f32("transformer.proj_out.lora_magnitude_vector.dora_scale", {16})}, {}, "DoRA");
    refused("diff.safetensors", {f32("diffusion_model.proj_out.diff", {16, 64})}, {}, "full weight difference");
    refused("checkpoint.safetensors", {f32("proj_out.weight", {16, 64})}, {}, "is not a LoRA key");
    refused("half.safetensors", {f32("transformer.proj_out.lora_A.weight", {4, 64})}, {}, "no up (B)");
    refused("pattern.safetensors", {f32("transformer.proj_out.lora_A.weight", {4, 64}), f32("transformer.proj_out.lora_B.weight", {16, 4})},
            {{"lora_adapter_metadata", R"({"r": 4, "lora_alpha": 4, "alpha_pattern": {"proj_out": 8}})"}}, "alpha_pattern");
    // "diffusion_model." is not a ".diff" key.
    const auto p = tmp("prefix.safetensors");
    ddo::bench::write_safetensors(p, {f32("model.diffusion_model.proj_out.lora_A.weight", {4, 64}),
                                      f32("model.diffusion_model.proj_out.lora_B.weight", {16, 4})});
    EXPECT_EQ(LoraFile::open(p).layers().at(0).module, "proj_out");
}

TEST(LoraFile, TwoModulesThatFlattenAlikeMakeKohyaNamesAmbiguous) {
    const auto p = tmp("ambiguous.safetensors");
    ddo::bench::write_safetensors(p, {f32("lora_unet_a_b.lora_down.weight", {2, 8}), f32("lora_unet_a_b.lora_up.weight", {8, 2})});
    const std::map<std::string, std::vector<std::int64_t>> modules = {{"a.b", {8, 8}}, {"a_b", {8, 8}}};
    EXPECT_THROW(match_lora(LoraFile::open(p), "transformer", false, modules), ddo::UsageError);
}

}  // namespace
