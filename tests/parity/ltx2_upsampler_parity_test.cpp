// LTX-2 latent upsampler parity against diffusers fixtures (tools/reference/ltx2_upsampler_fixtures.py): the
// LTX2LatentUpsamplerModel forward for plain x2 (2.3-like), rational x2 and x1.5 (2.0-like, BlurDownsample),
// temporal and spatiotemporal x2; the blur kernel built when the checkpoint lacks it; the two-stage latent chain
// (de-normalise, upsample, AdaIN / tone mapping, normalise; 5-D and packed input; fp32 and bf16 weights); every
// forward through the offload engine (group_leaf, one group per ResBlock / stage) bitwise equal to resident; config,
// checkpoint and VAE-fit errors naming key / tensor and file.
// Tolerances (CPU): fp32 max abs 1e-4 (outputs of order 1-10 after the chain's normalisation); bf16 weights
// (x2_bf16) 0.016, one bf16 ulp at the output's magnitude (|out| <= 3.5): the reference runs in bf16, and the same
// chain in fp32 differs from it by 0.032, so the test sees whether the C++ runs in the weights' dtype; engine vs
// resident: bitwise.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latent_upsampler.hpp"
#include "latent_upsampler_config.hpp"
#include "parity/parity_support.hpp"
#include "video_vae_config.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = LTX2_UPSAMPLER_FIXTURE_DIR;
constexpr double kTol = 1e-4;
constexpr double kBf16Tol = 1.6e-2;

using ddo::test::error_of;
using ddo::test::expect_close;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_upsampler_fixtures"); }

class Ltx2Upsampler : public ddo::test::ParitySuite {
protected:
    Ltx2Upsampler() : ParitySuite(kDir, "ltx2_upsampler_fixtures") {}
};

TensorFile fixture() { return TensorFile::open_file(kDir / "upsample.safetensors"); }

// One tiny upsampler of the fixture set, validated and read resident on the CPU in `dtype`.
struct Upsampler {
    explicit Upsampler(const std::string & name, at::ScalarType dtype = at::kFloat)
        : config(lt::LatentUpsamplerConfig::load(kDir / name)), file(TensorFile::open_component(kDir / name)),
          weights(file, dtype, at::Device(at::kCPU)) {
        lt::validate_latent_upsampler_checkpoint(file, config);
    }
    lt::LatentUpsamplerConfig config;
    TensorFile file;
    lt::ResidentWeights weights;
    lt::LatentUpsampler model{config, weights};
};

struct Vae {
    explicit Vae(const std::string & name)
        : config(lt::VideoVaeConfig::load(kDir / name)), file(TensorFile::open_component(kDir / name)),
          stats(lt::read_video_latent_stats(file, config)) {}
    lt::VideoVaeConfig config;
    TensorFile file;
    lt::VideoLatentStats stats;
};

// The forward of `up` through the offload engine (what ModelRun::plan makes for route group_leaf on the CPU).
at::Tensor engine_forward(const Upsampler & up, const at::Tensor & x, std::size_t * groups_out = nullptr,
                          std::uint64_t * streamed = nullptr) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_UPSAMPLER_PLUGIN_DIR);
    EXPECT_NE(linear, nullptr);
    const auto plan = ddo::test::cpu_plan("latent_upsampler", ddo::Route::group_leaf, linear);
    const auto groups = lt::latent_upsampler_groups(up.config, up.file);
    auto cw = ddo::model::ComponentWeights::open(up.file.origin(), groups, plan, at::kFloat);
    at::Tensor y;
    {
        lt::EngineWeights engine(*cw, groups, at::kFloat, at::Device(at::kCPU));
        const lt::LatentUpsampler model(up.config, engine);
        y = model.forward(x);
    }
    EXPECT_EQ(cw->finish(), 0u);
    EXPECT_EQ(cw->route(), "group_leaf");
    if (groups_out) *groups_out = groups.size();
    if (streamed) *streamed = cw->bytes_streamed();
    return y;
}

nlohmann::json config_json(const fs::path & dir) {
    std::ifstream in(dir / "config.json");
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_F(Ltx2Upsampler, ForwardEqualsTheReference) {
    auto f = fixture();
    int ran = 0;
    for (const auto & m : reference().at("models")) {
        const auto name = m.at("name").get<std::string>();
        Upsampler up(name);
        const auto x = f.read("model." + name + ".x");
        const auto want = f.read("model." + name + ".out");
        EXPECT_EQ(up.config.out_frames(x.size(2)), want.size(2)) << name;
        EXPECT_EQ(up.config.out_height(x.size(3)), want.size(3)) << name;
        EXPECT_EQ(up.config.out_width(x.size(4)), want.size(4)) << name;
        expect_close("forward " + name + " (" + up.config.describe() + ", " + ddo::model::shape_str(x.sizes()) +
                         " -> " + ddo::model::shape_str(want.sizes()) + ")",
                     up.model.forward(x), want, kTol);
        ++ran;
    }
    EXPECT_EQ(ran, 5);
}

TEST_F(Ltx2Upsampler, BlurKernelBuiltWhenNotStored) {
    auto f = fixture();
    Upsampler stored("r15"), built("r15_nokernel");
    ASSERT_TRUE(stored.file.contains(lt::kLatentUpsamplerBlurKernel));
    ASSERT_FALSE(built.file.contains(lt::kLatentUpsamplerBlurKernel));
    const auto x = f.read("model.r15.x");
    const auto a = stored.model.forward(x), b = built.model.forward(x);
    expect_close("forward r15 without the stored blur kernel", b, f.read("model.r15.out"), kTol);
    EXPECT_TRUE(at::equal(a, b)) << "the binomial kernel differs from the stored one";
}

TEST_F(Ltx2Upsampler, TwoStageChainEqualsTheReference) {
    auto f = fixture();
    int ran = 0;
    for (const auto & c : reference().at("chain")) {
        const auto name = c.at("name").get<std::string>();
        const bool bf16 = c.at("dtype").get<std::string>() == "bfloat16";
        Upsampler up(c.at("upsampler").get<std::string>(), bf16 ? at::kBFloat16 : at::kFloat);
        Vae vae(c.at("vae").get<std::string>());
        lt::check_latent_upsampler_fits_vae(up.config, vae.config);
        const lt::LatentUpsampleOptions o{c.at("adain_factor").get<double>(),
                                          c.at("tone_map_compression_ratio").get<double>()};
        const auto latents = f.read("chain." + name + ".latents");
        const auto got = c.at("packed").get<bool>()
                             ? lt::upsample_video_latents(up.model, latents, c.at("latent_frames").get<int64_t>(),
                                                          c.at("latent_height").get<int64_t>(),
                                                          c.at("latent_width").get<int64_t>(), vae.stats,
                                                          vae.config.scaling_factor, o)
                             : lt::upsample_video_latents(up.model, latents, vae.stats, vae.config.scaling_factor, o);
        const auto want = f.read("chain." + name + ".out");
        EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name << ": the reference returns the upsampler's dtype";
        expect_close("chain " + name + " (" + up.config.describe() + ", " + c.at("dtype").get<std::string>() +
                         (c.at("packed").get<bool>() ? ", packed" : ", 5-D") + ", adain " +
                         std::to_string(o.adain_factor) + ", tone map " +
                         std::to_string(o.tone_map_compression_ratio) + ")",
                     got, want, bf16 ? kBf16Tol : kTol);
        ++ran;
    }
    EXPECT_EQ(ran, 5);
}

TEST_F(Ltx2Upsampler, EngineEqualsResidentBitwise) {
    auto f = fixture();
    for (const auto & m : reference().at("models")) {
        const auto name = m.at("name").get<std::string>();
        Upsampler up(name);
        const auto x = f.read("model." + name + ".x");
        const auto want = up.model.forward(x);
        std::size_t groups = 0;
        std::uint64_t streamed = 0;
        const auto got = engine_forward(up, x, &groups, &streamed);
        EXPECT_GT(streamed, 0u);
        EXPECT_EQ(groups, std::size_t(2 * up.config.num_blocks_per_stage + 3));
        EXPECT_TRUE(at::equal(want, got)) << name << ": the engine differs from resident";
        expect_close("engine " + name, got, f.read("model." + name + ".out"), kTol);
        std::cout << "[ routes    ] " << name << ": group_leaf (" << groups << " groups, " << streamed
                  << " bytes streamed) == resident bitwise\n";
    }
}

TEST_F(Ltx2Upsampler, GroupsCoverTheCheckpoint) {
    for (const std::string name : {"x2", "r2", "r15", "t2", "st2", "r15_nokernel"}) {
        Upsampler up(name);
        std::set<std::string> grouped, stored;
        std::vector<std::string> order;
        for (const auto & g : lt::latent_upsampler_groups(up.config, up.file)) {
            order.push_back(g.name);
            for (const auto & t : g.tensors) EXPECT_TRUE(grouped.insert(t).second) << t << " in two groups";
        }
        for (const auto & n : up.file.names()) stored.insert(n);
        EXPECT_EQ(grouped, stored) << name << ": the groups hold every tensor of the checkpoint";
        EXPECT_EQ(order.front(), "initial");
        EXPECT_EQ(order.back(), "final_conv");
        EXPECT_GT(lt::latent_upsampler_weight_bytes(up.config, at::kBFloat16), 0u);
    }
}

TEST_F(Ltx2Upsampler, CheckpointErrorsNameTensorAndFile) {
    for (const auto & b : reference().at("broken")) {
        const auto name = b.at("name").get<std::string>();
        const auto dir = kDir / "broken" / name;
        const auto cfg = lt::LatentUpsamplerConfig::load(dir);
        const auto file = TensorFile::open_component(dir);
        const auto e = error_of([&] { lt::validate_latent_upsampler_checkpoint(file, cfg); });
        std::cout << "[ error     ] " << name << ": " << e << "\n";
        EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
        EXPECT_NE(e.find(b.at("tensor").get<std::string>()), std::string::npos) << e;
        EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
    }
}

TEST_F(Ltx2Upsampler, UpsamplerThatDoesNotFitTheVaeIsRefused) {
    Upsampler x2("x2");  // in_channels 16
    Vae vae8("vae8");    // latent_channels 8
    const auto e = error_of([&] { lt::check_latent_upsampler_fits_vae(x2.config, vae8.config); });
    std::cout << "[ error     ] fit: " << e << "\n";
    EXPECT_EQ(e.rfind("usage: ", 0), 0u) << e;
    EXPECT_NE(e.find((kDir / "x2" / "config.json").string()), std::string::npos) << e;
    EXPECT_NE(e.find((kDir / "vae8" / "config.json").string()), std::string::npos) << e;
    EXPECT_NE(e.find("in_channels"), std::string::npos) << e;
    EXPECT_EQ(error_of([&] { lt::check_latent_upsampler_fits_vae(x2.config, Vae("vae16").config); }), "");
}

TEST_F(Ltx2Upsampler, WrongInputsAreRefused) {
    Upsampler r2("r2");
    Vae vae8("vae8");
    const auto bad_channels = error_of([&] { r2.model.forward(at::zeros({1, 16, 1, 2, 2})); });
    const auto bad_rank = error_of([&] { r2.model.forward(at::zeros({1, 8, 2, 2})); });
    const auto bad_packed = error_of([&] {
        lt::upsample_video_latents(r2.model, at::zeros({1, 11, 8}), 2, 2, 3, vae8.stats, 1.0);
    });
    const auto bad_tone = error_of([&] {
        lt::upsample_video_latents(r2.model, at::zeros({1, 8, 1, 2, 2}), vae8.stats, 1.0, {0.0, 1.5});
    });
    for (const auto & [what, e, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"channels", bad_channels, "[B, 8, F, H, W]"},
             {"rank", bad_rank, "[B, 8, F, H, W]"},
             {"packed", bad_packed, "[B, 12, 8]"},
             {"tone", bad_tone, "tone_map_compression_ratio"}}) {
        std::cout << "[ error     ] " << what << ": " << e << "\n";
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << what << ": " << e;
        EXPECT_NE(e.find(key), std::string::npos) << e;
    }
}

TEST_F(Ltx2Upsampler, ConfigRejectsUnsupportedValues) {
    const fs::path file = kDir / "r2" / "config.json";
    const auto base = config_json(kDir / "r2");
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"dims", 2},
             {"rational_spatial_scale", 3.0},
             {"mid_channels", 48},
             {"in_channels", 0},
             {"spatial_upsample", false}}) {  // and temporal_upsample false: the reference raises
        auto j = base;
        j[key] = value;
        const auto e = error_of([&] { lt::LatentUpsamplerConfig::from_json(j, file); });
        std::cout << "[ error     ] " << key << ": " << e << "\n";
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << key << ": " << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    }
    auto j = base;
    j["mid_channels"] = "many";
    EXPECT_EQ(error_of([&] { lt::LatentUpsamplerConfig::from_json(j, file); }).rfind("runtime: ", 0), 0u);
}

TEST_F(Ltx2Upsampler, ConfigOfTheReleasedUpsamplers) {
    // LTX-2.0 latent_upsampler/config.json (the class defaults) and LTX-2.3 x2 (use_rational_resampler false).
    auto c = lt::LatentUpsamplerConfig::from_json(nlohmann::json::object(), "v20/config.json");
    EXPECT_EQ(c.kind, lt::LatentUpsamplerKind::spatial_rational);
    EXPECT_EQ(c.describe(), "spatial rational x2 (2/1)");
    EXPECT_EQ(c.out_height(11), 22);
    const auto bytes20 = lt::latent_upsampler_weight_bytes(c, at::kBFloat16);
    c = lt::LatentUpsamplerConfig::from_json({{"use_rational_resampler", false}}, "v23/config.json");
    EXPECT_EQ(c.kind, lt::LatentUpsamplerKind::spatial);
    EXPECT_EQ(c.out_width(20), 40);
    EXPECT_EQ(lt::latent_upsampler_weight_bytes(c, at::kBFloat16), bytes20);  // same conv shapes, other names
    // ~498M parameters (conditioning-serving-peers.md §2.4: about 1.0 GB in bf16).
    std::cout << "[ size      ] released x2 upsampler: " << bytes20 << " bytes in bf16\n";
    EXPECT_GT(bytes20, 990'000'000u);
    EXPECT_LT(bytes20, 1'000'000'000u);
    c = lt::LatentUpsamplerConfig::from_json({{"rational_spatial_scale", 1.5}}, "x15/config.json");
    EXPECT_EQ(c.describe(), "spatial rational x1.5 (3/2)");
    EXPECT_EQ(c.out_height(16), 24);
}

TEST_F(Ltx2Upsampler, ConfigFromTheWeightsEqualsConfigJson) {
    for (const std::string name : {"x2", "r2", "r15", "t2", "st2", "r15_nokernel"}) {
        Upsampler up(name);
        const auto w = lt::LatentUpsamplerConfig::from_weights(up.file, up.file.origin());
        EXPECT_EQ(w.describe(), up.config.describe()) << name;
        EXPECT_EQ(w.kind, up.config.kind) << name;
        EXPECT_EQ(w.in_channels, up.config.in_channels) << name;
        EXPECT_EQ(w.mid_channels, up.config.mid_channels) << name;
        EXPECT_EQ(w.num_blocks_per_stage, up.config.num_blocks_per_stage) << name;
        EXPECT_EQ(w.num, up.config.num) << name;
        EXPECT_EQ(w.den, up.config.den) << name;
        lt::validate_latent_upsampler_checkpoint(up.file, w);
        std::cout << "[ detect    ] " << name << ": " << w.describe() << " from the weights\n";
    }
    // A checkpoint that is not an upsampler: the VAE.
    const auto vae = TensorFile::open_component(kDir / "vae8");
    const auto e = error_of([&] { lt::LatentUpsamplerConfig::from_weights(vae, kDir / "vae8"); });
    std::cout << "[ error     ] not an upsampler: " << e << "\n";
    EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
    EXPECT_NE(e.find("initial_conv.weight"), std::string::npos) << e;
    EXPECT_NE(e.find((kDir / "vae8").string()), std::string::npos) << e;
}
