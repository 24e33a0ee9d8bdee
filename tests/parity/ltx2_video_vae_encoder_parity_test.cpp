// LTX-2 video VAE encoder parity against diffusers fixtures (tools/reference/ltx2_video_vae_encoder_fixtures.py):
// one frame ([1, 3, 1, H, W], the image-to-video condition) -> several frames (1 + 8k) on a 2.0-like, a 2.3-like,
// an odd config (stride-2 conv downsampler, a block without downsampler, non-causal, replicate padding) and the
// pipelines' tiny one-block VAE; the mode of the latent distribution (retrieve_latents(..., "argmax")); the
// pipelines' normalisation; spatial tiles (tiled_encode) mapped from vae.tile_size / vae.tile_overlap; leaf_offload
// through the offload engine (group_leaf, one group per leaf) bitwise equal to resident; config and checkpoint
// errors naming key / tensor and file.
// Tolerances (fp32, CPU): latents max abs 1e-4 (latents of about unit size, printed); normalisation of the
// reference latents 1e-6; encode + normalise 1e-3 (the latents' 1e-4 times scaling_factor / std, std >= 0.5);
// leaf_offload vs resident: bitwise.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "video_vae_config.hpp"
#include "video_vae_encoder.hpp"
#include "video_vae_tiling.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = LTX2_VIDEO_VAE_ENCODER_FIXTURE_DIR;
constexpr double kLatentTol = 1e-4;
constexpr double kNormTol = 1e-6;

using ddo::test::error_of;
using ddo::test::expect_close;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_video_vae_encoder_fixtures"); }

class Ltx2VideoVaeEncoder : public ddo::test::ParitySuite {
protected:
    Ltx2VideoVaeEncoder() : ParitySuite(kDir, "ltx2_video_vae_encoder_fixtures") {}
};

TensorFile encode_fixture() { return TensorFile::open_file(kDir / "encode.safetensors"); }

// One tiny VAE of the fixture set, read resident in fp32 on the CPU.
struct Vae {
    explicit Vae(const std::string & name)
        : config(lt::VideoVaeConfig::load(kDir / name)), file(TensorFile::open_component(kDir / name)) {
        lt::validate_video_vae_encoder_checkpoint(file, config);
    }
    lt::VideoVaeConfig config;
    TensorFile file;
    lt::ResidentWeights weights{file, at::kFloat, at::Device(at::kCPU)};
    lt::VideoVaeEncoder encoder{config, weights};
};

// Every untiled case whose name contains `part`, encoded in one piece; returns how many ran.
int run_resident(const std::string & part) {
    auto f = encode_fixture();
    int ran = 0;
    for (const auto & c : reference().at("cases")) {
        const auto name = c.at("name").get<std::string>();
        if (!c.at("tile").is_null() || name.find(part) == std::string::npos) continue;
        Vae vae(c.at("vae").get<std::string>());
        const auto video = f.read(name + ".video");
        const auto want = f.read(name + ".latents");
        const auto got = vae.encoder.encode(video);
        EXPECT_EQ(vae.config.encoded_frames(video.size(2)), want.size(2)) << name;
        EXPECT_EQ(video.size(3) / vae.config.spatial_downscale(), want.size(3)) << name;
        expect_close(name + " " + ddo::model::shape_str(video.sizes()) + " -> " + ddo::model::shape_str(want.sizes()) +
                         " (max |latent| " + std::to_string(want.abs().max().item<double>()) + ")",
                     got, want, kLatentTol);
        ++ran;
    }
    return ran;
}

nlohmann::json config_json(const fs::path & dir) {
    std::ifstream in(dir / "config.json");
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_F(Ltx2VideoVaeEncoder, EncodeOneFrame) { EXPECT_EQ(run_resident("_single"), 4); }

TEST_F(Ltx2VideoVaeEncoder, EncodeSeveralFrames) { EXPECT_EQ(run_resident("_multi"), 5); }

TEST_F(Ltx2VideoVaeEncoder, Normalisation) {
    auto f = encode_fixture();
    for (const auto & c : reference().at("cases")) {
        const auto name = c.at("name").get<std::string>();
        Vae vae(c.at("vae").get<std::string>());
        const auto stats = lt::read_video_latent_stats(vae.file, vae.config);
        const auto got = lt::normalize_video_latents(f.read(name + ".latents"), stats.mean, stats.std,
                                                     vae.config.scaling_factor);
        expect_close("normalize " + name + " (scaling_factor " + std::to_string(vae.config.scaling_factor) + ")", got,
                     f.read(name + ".normalized"), kNormTol);
        // The inverse of the decoder's de-normalisation.
        expect_close("denormalize(normalize) " + name,
                     lt::denormalize_video_latents(got, stats.mean, stats.std, vae.config.scaling_factor),
                     f.read(name + ".latents"), kNormTol);
    }
}

TEST_F(Ltx2VideoVaeEncoder, EncodeOneFrameNormalised) {
    // The image-to-video condition end to end: encode one frame, take the mode, normalise.
    auto f = encode_fixture();
    for (const std::string name : {"v20_single", "v23_single", "odd_single", "tiny_single"}) {
        Vae vae(name.substr(0, name.find('_')));
        const auto stats = lt::read_video_latent_stats(vae.file, vae.config);
        const auto got = lt::normalize_video_latents(vae.encoder.encode(f.read(name + ".video")), stats.mean,
                                                     stats.std, vae.config.scaling_factor);
        expect_close("normalized " + name, got, f.read(name + ".normalized"), kLatentTol * 10);
    }
}

TEST_F(Ltx2VideoVaeEncoder, PipelineConditionImagesEncodeAsTheReference) {
    // The image-to-video and condition pipelines' own encode + normalise (ltx2_conditioning_fixtures.py: the tiny
    // LTX-2.0 / 2.3 checkpoints' VAEs, the preprocessed images and the normalised latents the pipelines made).
    const fs::path dir = LTX2_CONDITIONING_FIXTURE_DIR;
    if (!fs::exists(dir / "reference.json"))
        GTEST_SKIP() << dir << "/reference.json missing: build target ltx2_conditioning_fixtures";
    using Case = std::tuple<std::string, std::string, std::string, std::string>;  // fixture, checkpoint, in, out
    for (const auto & [file, checkpoint, pixels, latents] : std::vector<Case>{
             {"i2v_20", "checkpoint_20", "image", "image_latents"},
             {"i2v_23", "checkpoint_23", "image", "image_latents"},
             {"cond_23", "checkpoint_23", "cond0.pixels", "cond0.latents"},
             {"cond_23", "checkpoint_23", "cond1.pixels", "cond1.latents"}}) {
        const auto vae_dir = dir / checkpoint / "vae";
        const auto config = lt::VideoVaeConfig::load(vae_dir);
        const auto weights_file = TensorFile::open_component(vae_dir);
        lt::validate_video_vae_encoder_checkpoint(weights_file, config);
        lt::ResidentWeights w(weights_file, at::kFloat, at::Device(at::kCPU));
        const lt::VideoVaeEncoder encoder(config, w);
        const auto f = TensorFile::open_file(dir / (file + ".safetensors"));
        auto video = f.read(pixels);
        if (video.dim() == 4) video = video.unsqueeze(2);  // vae.encode(image.unsqueeze(2))
        const auto stats = lt::read_video_latent_stats(weights_file, config);
        const auto got = lt::normalize_video_latents(encoder.encode(video), stats.mean, stats.std, 1.0);
        expect_close(file + " " + pixels + " -> " + latents, got, f.read(latents), kLatentTol);
    }
}

TEST_F(Ltx2VideoVaeEncoder, EncodeTiled) {
    auto f = encode_fixture();
    int ran = 0;
    for (const auto & c : reference().at("cases")) {
        if (c.at("tile").is_null()) continue;
        const auto name = c.at("name").get<std::string>();
        Vae vae(c.at("vae").get<std::string>());
        const ddo::model::VaeTiles tiles{c.at("tile").get<int>(), c.at("overlap").get<int>()};
        const auto tiling = lt::VideoVaeTiling::from_plan(tiles, 16, vae.config);
        int pieces = 0;
        const auto got = lt::encode_video_tiled(vae.encoder, f.read(name + ".video"), tiling, [&](int done, int total) {
            EXPECT_EQ(done, pieces + 1);
            EXPECT_GE(total, done);
            pieces = done;
        });
        EXPECT_GT(pieces, 1) << name << " must encode in several tiles";
        expect_close(name + " (tile " + std::to_string(tiles.tile) + ", overlap " + std::to_string(tiles.overlap) +
                         ", " + std::to_string(pieces) + " tiles)",
                     got, f.read(name + ".latents"), kLatentTol);
        ++ran;
    }
    EXPECT_EQ(ran, 3);
    // A video within one tile is encoded in one piece.
    Vae vae("v20");
    const auto video = f.read("v20_single.video");
    int pieces = 0;
    const auto got = lt::encode_video_tiled(vae.encoder, video, lt::VideoVaeTiling::from_plan({64, 32}, 16, vae.config),
                                            [&](int done, int) { pieces = done; });
    EXPECT_EQ(pieces, 1);
    EXPECT_TRUE(at::equal(got, vae.encoder.encode(video)));
}

TEST_F(Ltx2VideoVaeEncoder, SpecsAndLeafGroupsCoverTheEncoder) {
    for (const std::string name : {"v20", "v23", "odd", "tiny"}) {
        Vae vae(name);
        std::set<std::string> specs, grouped, stored;
        for (const auto & [t, shape] : lt::video_vae_encoder_specs(vae.config))
            EXPECT_TRUE(specs.insert(t).second) << t;
        for (const auto & g : lt::video_vae_encoder_leaf_groups(vae.config)) {
            for (const auto & t : g.tensors) {
                EXPECT_TRUE(grouped.insert(t).second) << t << " in two groups";
                EXPECT_EQ(t.rfind(g.name + ".", 0), 0u) << t << " outside its module " << g.name;
            }
        }
        for (const auto & n : vae.file.names())
            if (n.rfind("encoder.", 0) == 0) stored.insert(n);
        EXPECT_EQ(specs, grouped) << name;
        EXPECT_EQ(specs, stored) << name << ": the encoder reads every encoder tensor of the checkpoint";
    }
}

TEST_F(Ltx2VideoVaeEncoder, LeafOffloadThroughTheEngineEqualsResidentBitwise) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_VIDEO_VAE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    auto f = encode_fixture();
    for (const std::string name : {"v20_single", "v23_multi", "odd_multi"}) {
        const std::string vname = name.substr(0, name.find('_'));
        Vae vae(vname);
        const auto video = f.read(name + ".video");
        const auto want = vae.encoder.encode(video);

        // What ModelRun::plan makes for vae.strategy = leaf_offload on the CPU.
        const auto plan = ddo::test::cpu_plan("vae", ddo::Route::group_leaf, linear);
        const auto groups = lt::video_vae_encoder_leaf_groups(vae.config);
        auto cw = ddo::model::ComponentWeights::open(kDir / vname, groups, plan, at::kFloat);
        at::Tensor got;
        {
            lt::EngineWeights engine(*cw, groups, at::kFloat, at::Device(at::kCPU));
            const lt::VideoVaeEncoder leafwise(vae.config, engine);
            got = leafwise.encode(video);
        }
        EXPECT_EQ(cw->finish(), 0u);
        EXPECT_EQ(cw->route(), "group_leaf");
        EXPECT_GT(cw->bytes_streamed(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << name << ": leaf_offload differs from resident";
        expect_close(name + " leaf_offload vs diffusers", got, f.read(name + ".latents"), kLatentTol);
        std::cout << "[ routes    ] " << name << ": leaf_offload (group_leaf, " << groups.size()
                  << " leaf groups, " << cw->bytes_streamed() << " bytes streamed) == resident bitwise\n";
    }
}

TEST_F(Ltx2VideoVaeEncoder, StageCheckMayInterruptTheEncode) {
    auto f = encode_fixture();
    Vae vae("v20");
    std::vector<std::string> stages;
    vae.encoder.set_stage_check([&](const std::string & s) {
        stages.push_back(s);
        if (s == "encoder.down_blocks.1") throw ddo::RuntimeError("interrupted");
    });
    EXPECT_EQ(error_of([&] { vae.encoder.encode(f.read("v20_single.video")); }), "runtime: interrupted");
    EXPECT_EQ(stages, (std::vector<std::string>{"encoder.down_blocks.0", "encoder.down_blocks.1"}));
}

TEST_F(Ltx2VideoVaeEncoder, EncodeRejectsWrongInputs) {
    Vae v20("v20");
    const auto rgb = [](int64_t f, int64_t h, int64_t w) { return at::zeros({1, 3, f, h, w}); };
    for (const auto & [what, e, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"channels", error_of([&] { v20.encoder.encode(at::zeros({1, 4, 1, 32, 32})); }), "in_channels"},
             {"rank", error_of([&] { v20.encoder.encode(at::zeros({3, 32, 32})); }), "[B, 3, F, H, W]"},
             {"frames", error_of([&] { v20.encoder.encode(rgb(2, 32, 32)); }), "1 + 8 k frames"},
             {"height", error_of([&] { v20.encoder.encode(rgb(1, 40, 32)); }), "multiples of 16"},
             {"width", error_of([&] { v20.encoder.encode(rgb(1, 32, 8)); }), "multiples of 16"}}) {
        std::cout << "[ error     ] " << what << ": " << e << "\n";
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << what << ": " << e;
        EXPECT_NE(e.find(key), std::string::npos) << e;
    }
    for (int64_t f : {1, 9, 17, 25}) EXPECT_TRUE(v20.config.encodable_frames(f)) << f;
    for (int64_t f : {0, 2, 8, 10, 16}) EXPECT_FALSE(v20.config.encodable_frames(f)) << f;
    // tiled_encode needs the configured compression to be the encoder's.
    auto j = config_json(kDir / "v20");
    j["spatial_compression_ratio"] = 32;
    const auto wrong = lt::VideoVaeConfig::from_json(j, kDir / "v20" / "config.json");
    const lt::VideoVaeEncoder enc(wrong, v20.weights);
    const auto e = error_of([&] {
        lt::encode_video_tiled(enc, rgb(1, 128, 64), lt::VideoVaeTiling::from_plan({64, 32}, 16, wrong));
    });
    EXPECT_NE(e.find("spatial_compression_ratio"), std::string::npos) << e;
}

TEST_F(Ltx2VideoVaeEncoder, ConfigLayoutOfTheRealCheckpoints) {
    // LTX-2.0 and 2.3 vae/config.json encoder keys (the converter's values, models.md §5.9) without a checkpoint.
    nlohmann::json v20 = {{"block_out_channels", {256, 512, 1024, 2048}},
                          {"layers_per_block", {4, 6, 6, 2, 2}},
                          {"down_block_types", std::vector<std::string>(4, "LTX2VideoDownBlock3D")},
                          {"downsample_type", {"spatial", "temporal", "spatiotemporal", "spatiotemporal"}},
                          {"spatio_temporal_scaling", {true, true, true, true}},
                          {"encoder_causal", true},
                          {"encoder_spatial_padding_mode", "zeros"},
                          {"decoder_block_out_channels", {256, 512, 1024}},
                          {"decoder_layers_per_block", {5, 5, 5, 5}},
                          {"decoder_causal", false},
                          {"spatial_compression_ratio", 32},
                          {"temporal_compression_ratio", 8}};
    auto c = lt::VideoVaeConfig::from_json(v20, "v20/config.json");
    ASSERT_EQ(c.down_blocks.size(), 4u);
    EXPECT_EQ(c.down_blocks[0].in_channels, 128);  // conv_in gives latent_channels
    EXPECT_EQ(c.down_blocks[3].out_channels, 2048);
    EXPECT_EQ(c.encoder_mid_channels, 2048);
    EXPECT_EQ(c.encoder_mid_layers, 2);
    EXPECT_EQ(c.spatial_downscale(), 32);
    EXPECT_EQ(c.encoded_frames(121), 16);
    EXPECT_EQ(c.encoded_frames(1), 1);
    EXPECT_TRUE(c.encodable_pixels(512));
    EXPECT_FALSE(c.encodable_pixels(500));
    auto spec = lt::video_vae_encoder_specs(c);
    // 20 resnets x 2 convs, 4 downsamplers, conv_in, conv_out.
    EXPECT_EQ(lt::video_vae_encoder_leaf_groups(c).size(), 46u);
    EXPECT_EQ(spec.front().first, "encoder.conv_in.conv.weight");
    EXPECT_EQ(spec.front().second, (std::vector<int64_t>{128, 48, 3, 3, 3}));
    EXPECT_EQ(spec.back().first, "encoder.conv_out.conv.bias");
    EXPECT_EQ(spec.back().second, (std::vector<int64_t>{129}));
    const auto has = [&](const std::string & n, std::vector<int64_t> shape) {
        for (const auto & [t, s] : spec)
            if (t == n) return s == shape;
        return false;
    };
    EXPECT_TRUE(has("encoder.down_blocks.0.downsamplers.0.conv.conv.weight", {64, 128, 3, 3, 3}));
    EXPECT_TRUE(has("encoder.down_blocks.1.downsamplers.0.conv.conv.weight", {256, 256, 3, 3, 3}));
    EXPECT_TRUE(has("encoder.down_blocks.3.downsamplers.0.conv.conv.weight", {256, 1024, 3, 3, 3}));
    EXPECT_TRUE(has("encoder.down_blocks.1.resnets.5.conv2.conv.bias", {256}));
    auto v23 = v20;
    v23["block_out_channels"] = {256, 512, 1024, 1024};
    v23["layers_per_block"] = {4, 6, 4, 2, 2};
    c = lt::VideoVaeConfig::from_json(v23, "v23/config.json");
    EXPECT_EQ(c.encoder_mid_channels, 1024);
    EXPECT_EQ(c.spatial_downscale(), 32);
    spec = lt::video_vae_encoder_specs(c);
    EXPECT_EQ(lt::video_vae_encoder_leaf_groups(c).size(), 42u);
    EXPECT_TRUE(has("encoder.down_blocks.3.downsamplers.0.conv.conv.weight", {128, 1024, 3, 3, 3}));
    EXPECT_FALSE(has("encoder.down_blocks.2.resnets.4.conv1.conv.weight", {1024, 1024, 3, 3, 3}));
    std::cout << "[ config    ] 2.3 encoder: " << spec.size() << " tensors, "
              << lt::video_vae_encoder_weight_bytes(c, at::kBFloat16) << " bytes in bf16\n";
}

TEST_F(Ltx2VideoVaeEncoder, ConfigRejectsUnsupportedValues) {
    const fs::path file = kDir / "v20" / "config.json";
    const auto base = config_json(kDir / "v20");
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"down_block_types", {"LTX2VideoDownBlock3D", "LTXVideoDownBlock3D", "LTX2VideoDownBlock3D",
                                   "LTX2VideoDownBlock3D"}},
             {"downsample_type", {"spatial", "sideways", "spatiotemporal", "spatiotemporal"}},
             {"downsample_type", {"spatial", "temporal"}},
             {"encoder_spatial_padding_mode", "mirror"},
             {"layers_per_block", {1, 1, 1}},
             {"spatio_temporal_scaling", {true, true, true}},
             {"block_out_channels", {16, 48, 64, 128}},   // 16 x 2 channels cannot be averaged into 48
             {"block_out_channels", {16, 32, 64, 132}}}) {  // not a multiple of 8
        auto j = base;
        j[key] = value;
        // The decoder does not need the encoder: the config loads, and the encoder's first use refuses it (Note
        // [Components validated when used]).
        const auto c = lt::VideoVaeConfig::from_json(j, file);
        EXPECT_FALSE(c.encoder_refusal.empty()) << key;
        const auto e = error_of([&] { c.require_encoder("--image a.png"); });
        EXPECT_NE(e.find("--image a.png"), std::string::npos) << e;
        std::cout << "[ error     ] " << key << ": " << e << "\n";
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << key << ": " << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    }
    // A block without downsampler (or with a stride-2 conv) keeps its width.
    auto j = base;
    j["spatio_temporal_scaling"] = {true, false, true, true};
    const auto e = error_of([&] { lt::VideoVaeConfig::from_json(j, file).require_encoder("encoding"); });
    EXPECT_NE(e.find("'block_out_channels'"), std::string::npos) << e;
    EXPECT_NE(e.find("encoder block 1"), std::string::npos) << e;
    // layers_per_block with one entry per block: the mid block takes the last (the pipelines' tiny VAEs).
    j = base;
    j["layers_per_block"] = {1, 2, 1, 3};
    const auto c = lt::VideoVaeConfig::from_json(j, file);
    EXPECT_EQ(c.down_blocks[3].layers, 3);
    EXPECT_EQ(c.encoder_mid_layers, 3);
}

TEST_F(Ltx2VideoVaeEncoder, CheckpointErrorsNameTensorAndFile) {
    for (const auto & b : reference().at("broken")) {
        const auto name = b.at("name").get<std::string>();
        const auto dir = kDir / "broken" / name;
        const auto cfg = lt::VideoVaeConfig::load(dir);
        const auto file = TensorFile::open_component(dir);
        const auto e = error_of([&] { lt::validate_video_vae_encoder_checkpoint(file, cfg); });
        std::cout << "[ error     ] " << name << ": " << e << "\n";
        EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
        EXPECT_NE(e.find(b.at("tensor").get<std::string>()), std::string::npos) << e;
        EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
        // The decoder does not need the encoder's tensors.
        EXPECT_NO_THROW(lt::validate_video_vae_checkpoint(file, cfg));
    }
    // A missing tensor read through the engine's groups also names it.
    const auto dir = kDir / "broken" / "missing";
    const auto cfg = lt::VideoVaeConfig::load(dir);
    const auto file = TensorFile::open_component(dir);
    lt::ResidentWeights w(file, at::kFloat, at::Device(at::kCPU));
    const lt::VideoVaeEncoder enc(cfg, w);
    const auto e = error_of([&] { enc.encode(encode_fixture().read("v20_single.video")); });
    std::cout << "[ error     ] missing, at encode: " << e << "\n";
    EXPECT_NE(e.find("encoder.down_blocks.1.resnets.1.conv2.conv.weight"), std::string::npos) << e;
}
