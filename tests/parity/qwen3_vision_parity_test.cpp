// The Qwen3-VL vision tower (ddo_text_models, qwen3_vision_model.hpp) against transformers' Qwen3VLVisionModel,
// fixtures of tools/reference/qwen3_vision_fixtures.py: the merged embeddings and every deepstack feature for one
// image and for three images of different grids in one call, on diffusers' test config (depth 1, one deepstack
// merger, a 4 x 4 position table) and a deeper one (depth 3, deepstack [0, 2], 50 position embeddings: a 7 x 7
// table resampled to grids of other sizes); images packed in one call equal to each alone (no attention across
// images); every engine route bitwise equal to the resident one; checkpoint, config and input errors naming the
// tensor / key and file. Tolerance (fp32): 1e-4 absolute on every output.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "qwen3_vision_model.hpp"

namespace fs = std::filesystem;
namespace text = ddo::text;
using ddo::test::max_abs;
using ddo::test::message_of;

namespace {

const fs::path kDir = QWEN3_VISION_FIXTURE_DIR;
constexpr double kTol = 1e-4;
using Grid = std::vector<std::array<int64_t, 3>>;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "qwen3_vision_fixtures"); }

ddo::model::ComponentPlan plan(ddo::Route route, double resident_gb = 0) {
    return ddo::test::cpu_plan("vision_tower", route, ddo::test::linear_allocator(QWEN3_VISION_PLUGIN_DIR), resident_gb);
}

ddo::model::TensorFile fixtures() { return ddo::model::TensorFile::open_file(kDir / "vision.safetensors"); }

Grid grid_of(const at::Tensor & g) {
    Grid out;
    const auto c = g.to(at::kLong).contiguous();
    const auto * p = c.data_ptr<int64_t>();
    for (int64_t i = 0; i < c.size(0); ++i) out.push_back({p[3 * i], p[3 * i + 1], p[3 * i + 2]});
    return out;
}

struct Tower {
    fs::path dir;
    text::Qwen3VisionConfig config;
    std::vector<ddo::model::GroupSpec> groups;
    explicit Tower(const std::string & name) : dir(kDir / name / "text_encoder") {
        config = text::Qwen3VisionConfig::from_file(dir / "config.json");
        const auto f = ddo::model::TensorFile::open_component(dir);
        groups = text::qwen3_vision_groups(config, f.names());
        text::qwen3_vision_check_weights(f, config);
    }
    std::unique_ptr<ddo::model::ComponentWeights> weights(ddo::Route route = ddo::Route::resident, double gb = 0,
                                                          at::ScalarType dtype = at::kFloat) const {
        return ddo::model::ComponentWeights::open(dir, groups, plan(route, gb), dtype);
    }
};

class Qwen3VisionParity : public ddo::test::ParitySuite {
protected:
    Qwen3VisionParity() : ParitySuite(kDir, "qwen3_vision_fixtures") {}
};

}  // namespace

TEST_F(Qwen3VisionParity, EmbedsAndEveryDeepstackFeatureMatchTransformers) {
    const auto f = fixtures();
    EXPECT_EQ(reference().at("return_type").get<std::string>(), "BaseModelOutputWithDeepstackFeatures");
    for (const auto & [name, vc] : reference().at("configs").items()) {
        Tower t(name);
        EXPECT_EQ(t.config.weight_prefix, reference().at("weight_prefix").at(name).get<std::string>());
        EXPECT_EQ(t.groups.size(), std::size_t(t.config.depth + 2));
        EXPECT_EQ(t.config.depth, vc.at("depth").get<int64_t>());
        auto w = t.weights();
        for (const auto & [c, _] : reference().at("cases").items()) {
            const auto t0 = std::chrono::steady_clock::now();
            const auto px = f.read(c + ".pixel_values");
            const auto grid = grid_of(f.read(c + ".grid_thw"));
            const auto got = text::qwen3_vision_forward(*w, t.config, px, grid, at::kFloat, at::kCPU);
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            const std::string what = name + "." + c;
            double worst = max_abs(got.embeds, f.read(what + ".embeds"), what + " embeds");
            EXPECT_LE(worst, kTol) << what << " embeds";
            std::cout << "[ parity    ] " << what << " (" << grid.size() << " image(s), " << px.size(0)
                      << " patches, " << ms << " ms): embeds " << got.embeds.sizes() << " max abs " << worst;
            ASSERT_EQ(got.deepstack.size(), vc.at("deepstack_visual_indexes").size()) << what;
            for (std::size_t k = 0; k < got.deepstack.size(); ++k) {
                const double e = max_abs(got.deepstack[k], f.read(what + ".deepstack." + std::to_string(k)),
                                         what + " deepstack " + std::to_string(k));
                EXPECT_LE(e, kTol) << what << " deepstack " << k;
                std::cout << ", deepstack." << k << " " << e;
            }
            std::cout << " (tolerance " << kTol << ")\n";
        }
        EXPECT_EQ(w->finish(), 0u);
    }
}

TEST_F(Qwen3VisionParity, ImagesInOneCallEqualEachAloneAndThePositionTableIsResampled) {
    // Packed images never attend to one another: each image alone gives its rows of the packed call. And the
    // fixtures would not catch a tower that ignores the interpolation: reading the table without resampling
    // (a table of the grid's own size) moves the output far past the tolerance.
    const auto f = fixtures();
    Tower t("deep");
    auto w = t.weights();
    const auto px = f.read("three.pixel_values");
    const auto grid = grid_of(f.read("three.grid_thw"));
    const auto all = text::qwen3_vision_forward(*w, t.config, px, grid, at::kFloat, at::kCPU);
    const int64_t merge2 = t.config.spatial_merge_size * t.config.spatial_merge_size;
    int64_t p0 = 0, r0 = 0;
    double worst = 0;
    for (const auto & g : grid) {
        const int64_t n = g[0] * g[1] * g[2];
        const auto one = text::qwen3_vision_forward(*w, t.config, px.narrow(0, p0, n), {g}, at::kFloat, at::kCPU);
        worst = std::max(worst, max_abs(one.embeds, all.embeds.narrow(0, r0, n / merge2)));
        for (std::size_t k = 0; k < one.deepstack.size(); ++k)
            worst = std::max(worst, max_abs(one.deepstack[k], all.deepstack[k].narrow(0, r0, n / merge2)));
        p0 += n, r0 += n / merge2;
    }
    EXPECT_LE(worst, 1e-5);
    auto square = t.config;  // 36 embeddings: a 6 x 6 table, read without the 7 x 7 -> grid resampling
    square.num_position_embeddings = 36;
    const auto want = f.read("deep.one.embeds");
    const auto wrong = text::qwen3_vision_forward(*w, square, f.read("one.pixel_values"),
                                                  grid_of(f.read("one.grid_thw")), at::kFloat, at::kCPU);
    const double e_table = max_abs(wrong.embeds, want);
    EXPECT_GT(e_table, 100 * kTol);
    std::cout << "[ controls  ] each image alone vs packed: max abs " << worst << "; a 6 x 6 table instead of 7 x 7: "
              << e_table << "\n";
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Qwen3VisionParity, Bf16RunsNearTheReference) {
    // bf16 weights and activations (the rotary and the position-table weights stay float32, as the reference's
    // casts have it) against the fp32 reference: a bound relative to the outputs' largest magnitude.
    const auto f = fixtures();
    Tower t("deep");
    auto w = t.weights(ddo::Route::resident, 0, at::kBFloat16);
    const auto got = text::qwen3_vision_forward(*w, t.config, f.read("three.pixel_values"),
                                                grid_of(f.read("three.grid_thw")), at::kBFloat16, at::kCPU);
    EXPECT_EQ(got.embeds.scalar_type(), at::kBFloat16);
    std::vector<std::pair<std::string, at::Tensor>> outs = {{"embeds", got.embeds}};
    for (std::size_t k = 0; k < got.deepstack.size(); ++k) outs.emplace_back("deepstack." + std::to_string(k), got.deepstack[k]);
    std::cout << "[ bf16      ] deep.three:";
    for (const auto & [name, x] : outs) {
        const auto want = f.read("deep.three." + name);
        const double bound = 0.05 * want.abs().max().item<double>(), e = max_abs(x, want, name);
        EXPECT_LE(e, bound) << name;
        std::cout << " " << name << " " << e << " (bound " << bound << ")";
    }
    std::cout << "\n";
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Qwen3VisionParity, EveryRouteEqualsResident) {
    const auto f = fixtures();
    Tower t("deep");
    const auto px = f.read("three.pixel_values");
    const auto grid = grid_of(f.read("three.grid_thw"));
    auto ref = t.weights();
    const auto want = text::qwen3_vision_forward(*ref, t.config, px, grid, at::kFloat, at::kCPU);
    ref->finish();
    for (auto route : {ddo::Route::component, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                       ddo::Route::group_leaf}) {
        auto w = t.weights(route, 1e-6);
        int blocks = 0;
        text::VisionTowerCallbacks cb;
        cb.on_block = [&](int b, int total) {
            blocks = b;
            EXPECT_EQ(total, int(t.config.depth));
        };
        const auto got = text::qwen3_vision_forward(*w, t.config, px, grid, at::kFloat, at::kCPU, cb);
        EXPECT_EQ(w->finish(), 0u) << w->route();
        EXPECT_EQ(blocks, int(t.config.depth)) << w->route();
        EXPECT_TRUE(at::equal(got.embeds, want.embeds)) << w->route() << " embeds differ from resident";
        ASSERT_EQ(got.deepstack.size(), want.deepstack.size());
        for (std::size_t k = 0; k < got.deepstack.size(); ++k)
            EXPECT_TRUE(at::equal(got.deepstack[k], want.deepstack[k])) << w->route() << " deepstack " << k;
        if (route == ddo::Route::component)  // read in place from the file mapping on the CPU (Note [Mapped residents])
            EXPECT_GT(w->report().at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u);
        else
            EXPECT_GT(w->bytes_streamed(), 0u) << w->route();
        std::cout << "[ routes    ] vision_tower " << w->route() << " == resident bitwise; bytes moved "
                  << w->bytes_streamed() << "\n";
    }
}

TEST_F(Qwen3VisionParity, InterruptionStopsBeforeTheNextBlock) {
    const auto f = fixtures();
    Tower t("deep");
    auto w = t.weights();
    text::VisionTowerCallbacks cb;
    int seen = -1;
    cb.check_interrupted = [&](int b) {
        seen = b;
        if (b == 1) throw ddo::UsageError("interrupted");
    };
    EXPECT_THROW((void)text::qwen3_vision_forward(*w, t.config, f.read("one.pixel_values"),
                                                  grid_of(f.read("one.grid_thw")), at::kFloat, at::kCPU, cb),
                 ddo::UsageError);
    EXPECT_EQ(seen, 1);
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Qwen3VisionParity, CheckpointErrorsNameTensorAndFile) {
    const std::string victim = reference().at("broken_tensor");
    for (const char * dir : {"broken_missing", "broken_shape"}) {
        auto c = text::Qwen3VisionConfig::from_file(kDir / dir / "config.json");
        const auto f = ddo::model::TensorFile::open_component(kDir / dir);
        (void)text::qwen3_vision_groups(c, f.names());
        const auto m = message_of<ddo::RuntimeError>([&] { text::qwen3_vision_check_weights(f, c); });
        EXPECT_NE(m.find(victim), std::string::npos) << dir << ": " << m;
        EXPECT_NE(m.find("model.safetensors"), std::string::npos) << dir << ": " << m;
        std::cout << "[ errors    ] " << dir << ": " << m << "\n";
    }
    const auto m = message_of<ddo::RuntimeError>([] {
        text::Qwen3VisionConfig c;
        (void)text::qwen3_vision_groups(c, {"model.language_model.embed_tokens.weight"});
    });
    EXPECT_NE(m.find("patch_embed.proj.weight"), std::string::npos) << m;
}

TEST_F(Qwen3VisionParity, UnimplementedConfigsAreRefusedNamingFileAndKey) {
    const fs::path dir = fs::temp_directory_path() / ("ddo_qwen3_vision_cfg_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto base = nlohmann::json::parse(std::ifstream(kDir / "deep" / "text_encoder" / "config.json"));
    const std::vector<std::pair<std::string, std::function<void(nlohmann::json &)>>> cases = {
        {"vision_config.hidden_act", [](nlohmann::json & j) { j["vision_config"]["hidden_act"] = "quick_gelu"; }},
        {"vision_config.rope_parameters.rope_type",
         [](nlohmann::json & j) { j["vision_config"]["rope_parameters"]["rope_type"] = "default"; }},
        {"vision_config.deepstack_visual_indexes",
         [](nlohmann::json & j) { j["vision_config"]["deepstack_visual_indexes"] = {0, 3}; }},
        {"vision_config.num_heads", [](nlohmann::json & j) { j["vision_config"]["num_heads"] = 4; }},  // head size 8 ok
        {"vision_config.patch_size", [](nlohmann::json & j) { j["vision_config"].erase("patch_size"); }},
        {"vision_config", [](nlohmann::json & j) { j.erase("vision_config"); }},
    };
    for (const auto & [key, change] : cases) {
        auto j = base;
        change(j);
        std::ofstream(dir / "config.json") << j.dump();
        const auto m = message_of<ddo::UsageError>([&] { (void)text::Qwen3VisionConfig::from_file(dir / "config.json"); });
        if (key == "vision_config.num_heads") {  // 32 / 4 = 8: allowed (a multiple of 4)
            EXPECT_EQ(m, "(no error of the expected type)") << m;
            continue;
        }
        EXPECT_NE(m.find((dir / "config.json").string() + ": " + key), std::string::npos) << key << ": " << m;
    }
    auto j = base;
    j["vision_config"]["num_heads"] = 16;  // head size 2: the 2-D rotary needs a multiple of 4
    std::ofstream(dir / "config.json") << j.dump();
    const auto m = message_of<ddo::UsageError>([&] { (void)text::Qwen3VisionConfig::from_file(dir / "config.json"); });
    EXPECT_NE(m.find("vision_config.num_heads"), std::string::npos) << m;
    fs::remove_all(dir);
}

TEST_F(Qwen3VisionParity, InputsThatDoNotFitTheGridAreRefused) {
    const auto f = fixtures();
    Tower t("small");
    auto w = t.weights();
    const auto px = f.read("one.pixel_values");
    const auto run = [&](const at::Tensor & p, const Grid & g) {
        return message_of<ddo::UsageError>([&] { (void)text::qwen3_vision_forward(*w, t.config, p, g, at::kFloat, at::kCPU); });
    };
    EXPECT_NE(run(px, {{1, 4, 4}}).find("grid_thw gives 16 patches, pixel_values holds 24"), std::string::npos);
    EXPECT_NE(run(px, {{1, 3, 8}}).find("multiples of spatial_merge_size"), std::string::npos);
    EXPECT_NE(run(px.narrow(1, 0, 100), {{1, 4, 6}}).find("pixel_values must be [patches, 1536]"), std::string::npos);
    EXPECT_NE(run(px, {}).find("no image"), std::string::npos);
    EXPECT_EQ(w->finish(), 0u);
}
