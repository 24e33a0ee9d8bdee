// The Qwen3-VL text side with condition images against transformers 5.24 (tools/reference/qwen3_vl_text_fixtures.py):
// smart_resize (Python's rounding) -> the RGBA composite over white (Pillow's paste with mask, every colour/alpha
// pair) -> Qwen2VLImageProcessorPil's pixel_values and grid_thw (exact) -> Qwen3VLModel.get_rope_index's 3-D
// positions (exact) -> the text tower fed the reference's vision features, last layer before the final norm (1e-4,
// fp32) for 1 image, 3 images of different sizes and a left-padded batch of 2 prompts -> every engine route equal to
// the resident one -> a pad-token count that does not match the features refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/media/image_composite.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "ddo/store/weight_store.hpp"
#include "parity/parity_support.hpp"
#include "qwen2_vl_image_processor.hpp"
#include "qwen3_text_model.hpp"

namespace fs = std::filesystem;
namespace text = ddo::text;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = QWEN3_VL_TEXT_FIXTURE_DIR;
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "qwen3_vl_text_fixtures"); }

ddo::model::ComponentPlan plan(ddo::Route route, double resident_gb = 0) {
    return ddo::test::cpu_plan("text_encoder", route, ddo::test::linear_allocator(QWEN3_VL_PLUGIN_DIR), resident_gb);
}

ddo::media::Image8 image_of(const at::Tensor & hwc) {
    auto t = hwc.contiguous();
    ddo::media::Image8 im{int(t.size(1)), int(t.size(0)), int(t.size(2)), {}};
    im.pixels.assign(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + t.numel());
    return im;
}

at::Tensor tensor_of(const ddo::media::Image8 & im) {
    return at::from_blob(const_cast<uint8_t *>(im.pixels.data()), {im.height, im.width, im.channels}, at::kByte).clone();
}

class Qwen3VlTextParity : public ddo::test::ParitySuite {
protected:
    Qwen3VlTextParity() : ParitySuite(kDir, "qwen3_vl_text_fixtures") {}

    fs::path te() const { return kDir / "checkpoint" / "text_encoder"; }
    text::Qwen3TextConfig config() {
        auto c = text::Qwen3TextConfig::from_file(te() / "config.json");
        groups_ = groups(c);
        return c;
    }
    static std::vector<ddo::model::GroupSpec> groups(text::Qwen3TextConfig & c) {
        auto store = ddo::store::WeightStore::open_component(kDir / "checkpoint" / "text_encoder");
        std::vector<std::string> names;
        for (const auto * t : store.tensors()) names.push_back(t->name);
        return text::qwen3_text_groups(c, names);
    }
    std::unique_ptr<ddo::model::ComponentWeights> weights(ddo::Route route, double gb = 0) {
        return ddo::model::ComponentWeights::open(te(), groups_, plan(route, gb), at::kFloat);
    }
    // The vision features of tower case `name` as the reference fed them to the language model.
    static text::VisionTokens vision(const TensorFile & f, const std::string & name) {
        const auto & spec = reference().at("tower_cases").at(name);
        text::VisionTokens v;
        v.embeds = f.read(name + ".embeds");
        for (int k = 0; k < spec.at("deepstack").get<int>(); ++k) v.deepstack.push_back(f.read(name + ".deepstack" + std::to_string(k)));
        const auto g = f.read(name + ".grid_thw").contiguous();
        for (int64_t i = 0; i < g.size(0); ++i)
            v.grid_thw.push_back({g[i][0].item<int64_t>(), g[i][1].item<int64_t>(), g[i][2].item<int64_t>()});
        v.image_token_id = spec.at("image_token_id").get<int64_t>();
        v.spatial_merge_size = spec.at("spatial_merge_size").get<int64_t>();
        return v;
    }

    std::vector<ddo::model::GroupSpec> groups_;
};

TEST_F(Qwen3VlTextParity, SmartResizeIsTransformers) {
    const auto t = TensorFile::open_file(kDir / "preprocess.safetensors").read("smart_resize.table").contiguous();
    const auto T = t.accessor<int64_t, 2>();
    for (int64_t r = 0; r < t.size(0); ++r) {
        const auto [h, w] = text::smart_resize(T[r][0], T[r][1], T[r][2], T[r][3], T[r][4]);
        EXPECT_EQ(h, T[r][5]) << T[r][0] << "x" << T[r][1] << " factor " << T[r][2] << " [" << T[r][3] << ", " << T[r][4] << "]";
        EXPECT_EQ(w, T[r][6]) << T[r][0] << "x" << T[r][1] << " factor " << T[r][2] << " [" << T[r][3] << ", " << T[r][4] << "]";
    }
    std::cout << "[ resize    ] smart_resize: " << t.size(0) << " (h, w, factor, bounds) rows equal\n";
    EXPECT_NE(ddo::test::error_of([] { (void)text::smart_resize(10, 2010, 32, 1, 1 << 30); }).find("aspect ratio"),
              std::string::npos);
}

TEST_F(Qwen3VlTextParity, CompositeOverWhiteIsPillowsPasteWithMask) {
    auto f = TensorFile::open_file(kDir / "preprocess.safetensors");
    for (const std::string name : {"blend_table", "rgba_80x48", "rgba_96x64"}) {
        const auto got = tensor_of(ddo::media::composite_over_white(image_of(f.read(name + ".image"))));
        const auto want = f.read(name + ".rgb");
        EXPECT_TRUE(at::equal(got, want)) << name;
        std::cout << "[ composite ] " << name << ": max |diff| " << ddo::test::max_abs(got.to(at::kInt), want.to(at::kInt))
                  << " (bytes)\n";
    }
    EXPECT_NE(ddo::test::error_of([] { (void)ddo::media::composite_over_white(ddo::media::Image8{1, 1, 3, {1, 2, 3}}); })
                  .find("RGBA"), std::string::npos);
}

TEST_F(Qwen3VlTextParity, ResizeFollowsPillowsPassOrder) {
    // Pillow 13 resizes vertically first when the height shrinks by more than twice the width (Note [PIL resize]):
    // sizes at that boundary and one off either side, every convolving filter, L / RGB / RGBA.
    auto f = TensorFile::open_file(kDir / "preprocess.safetensors");
    const auto t = f.read("resize.table").contiguous();
    const auto T = t.accessor<int64_t, 2>();
    using F = ddo::media::ResampleFilter;
    const F pil[] = {F::nearest, F::lanczos, F::bilinear, F::bicubic, F::box, F::hamming};
    int exact = 0;
    for (int64_t i = 0; i < t.size(0); ++i) {
        const std::string n = "resize." + std::to_string(i);
        const auto got = tensor_of(ddo::media::resize_like_pil(image_of(f.read(n + ".in")), int(T[i][3]), int(T[i][2]), pil[T[i][4]]));
        const bool eq = at::equal(got, f.read(n + ".out"));
        EXPECT_TRUE(eq) << T[i][1] << "x" << T[i][0] << " -> " << T[i][3] << "x" << T[i][2] << " filter " << T[i][4];
        exact += eq;
    }
    std::cout << "[ resize    ] resize_like_pil: " << exact << " of " << t.size(0) << " pass-order cases byte-exact\n";
}

TEST_F(Qwen3VlTextParity, PreprocessingIsQwen2VlImageProcessorPil) {
    const auto cfg = text::Qwen2VlImageProcessorConfig::from_file(kDir / "checkpoint" / "processor" / "preprocessor_config.json");
    EXPECT_EQ(cfg.patch_size, 16);
    EXPECT_EQ(cfg.merge_size, 2);
    EXPECT_EQ(cfg.temporal_patch_size, 2);
    auto f = TensorFile::open_file(kDir / "preprocess.safetensors");
    for (const auto & [name, hwc] : reference().at("preprocess").items()) {
        auto img = image_of(f.read(name + ".image"));
        if (img.channels == 4) img = ddo::media::composite_over_white(img);
        const auto got = text::preprocess_image(img, cfg);
        const auto want = f.read(name + ".pixel_values");
        const auto grid = f.read(name + ".grid_thw");
        const double d = ddo::test::max_abs(got.pixel_values, want, name);
        EXPECT_EQ(d, 0.0) << name;
        EXPECT_TRUE(got.pixel_values.sizes() == want.sizes() && at::equal(got.pixel_values, want)) << name;
        for (int a = 0; a < 3; ++a) EXPECT_EQ(got.grid_thw[size_t(a)], grid[a].item<int64_t>()) << name << " axis " << a;
        std::cout << "[ preprocess] " << name << " -> grid [" << got.grid_thw[0] << ", " << got.grid_thw[1] << ", "
                  << got.grid_thw[2] << "], pixel_values [" << got.pixel_values.size(0) << ", "
                  << got.pixel_values.size(1) << "] max |diff| " << d << "\n";
    }
}

TEST_F(Qwen3VlTextParity, AnImageProcessorConfigDdoDoesNotImplementIsRefused) {
    const fs::path dir = fs::temp_directory_path() / ("qwen3vl_ipc_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto write = [&](const std::string & body) {
        std::ofstream(dir / "preprocessor_config.json") << body;
        return ddo::test::error_of([&] { (void)text::Qwen2VlImageProcessorConfig::from_file(dir / "preprocessor_config.json"); });
    };
    for (const auto & [body, key] : std::vector<std::pair<std::string, std::string>>{
             {R"({"resample": 7})", "resample"},
             {R"({"image_mean": [0.5, 0.5]})", "image_mean"},
             {R"({"size": {"height": 10}})", "size"},
             {R"({"patch_size": 0})", "patch_size"},
             {R"({"image_processor_type": "CLIPImageProcessor"})", "image_processor_type"}}) {
        const auto e = write(body);
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << body << ": " << e;
        EXPECT_NE(e.find("preprocessor_config.json"), std::string::npos) << e;
        EXPECT_NE(e.find(key), std::string::npos) << e;
    }
    // min_pixels / max_pixels override size, as Qwen2VLImageProcessorPil.__init__.
    std::ofstream(dir / "preprocessor_config.json") << R"({"size": {"shortest_edge": 5, "longest_edge": 6}, "min_pixels": 7, "max_pixels": 8})";
    const auto c = text::Qwen2VlImageProcessorConfig::from_file(dir / "preprocessor_config.json");
    EXPECT_EQ(c.min_pixels, 7);
    EXPECT_EQ(c.max_pixels, 8);
    fs::remove_all(dir);
}

TEST_F(Qwen3VlTextParity, PositionsAreGetRopeIndexWithLeftPadding) {
    auto f = TensorFile::open_file(kDir / "text_tower.safetensors");
    for (const auto & [name, spec] : reference().at("tower_cases").items()) {
        const auto ids = f.read(name + ".input_ids"), mask = f.read(name + ".attention_mask");
        const auto v = vision(f, name);
        // The processor's mm_token_type_ids mark exactly the image pads (what qwen3_vl_position_ids groups by).
        EXPECT_TRUE(at::equal(f.read(name + ".mm_token_type_ids").to(at::kLong), (ids == v.image_token_id).to(at::kLong))) << name;
        const auto got = text::qwen3_vl_position_ids(ids, mask, v);
        const auto want = f.read(name + ".position_ids");
        EXPECT_TRUE(got.sizes() == want.sizes() && at::equal(got, want)) << name;
        std::cout << "[ positions ] " << name << ": " << v.grid_thw.size() << " image(s), [3, " << ids.size(0) << ", "
                  << ids.size(1) << "] equal: " << (got.sizes() == want.sizes() && at::equal(got, want)) << "\n";
    }
}

TEST_F(Qwen3VlTextParity, TextTowerWithImagesMatchesTransformers) {
    auto c = config();
    EXPECT_EQ(c.mrope_section, (std::array<int64_t, 3>{2, 1, 1})) << "rope_parameters.mrope_section";
    EXPECT_EQ(c.image_token_id, reference().at("tower_cases").at("one").at("image_token_id").get<int64_t>());
    EXPECT_EQ(c.spatial_merge_size, 2);
    auto f = TensorFile::open_file(kDir / "text_tower.safetensors");
    auto w = weights(ddo::Route::resident);
    for (const auto & [name, spec] : reference().at("tower_cases").items()) {
        const auto ids = f.read(name + ".input_ids"), mask = f.read(name + ".attention_mask");
        const auto v = vision(f, name);
        const auto got = text::qwen3_last_hidden_before_norm(*w, c, ids, mask, &v, at::kFloat, at::kCPU);
        const auto want = f.read(name + ".hidden");
        ASSERT_EQ(got.sizes(), want.sizes()) << name;
        const auto keep = mask.to(at::kBool);  // padded rows are defined but meaningless
        const double d = ddo::test::max_abs(got.index({keep}), want.index({keep}), name);
        EXPECT_LE(d, kTol) << name;
        // The features matter: without the deepstack sums the output moves well past the tolerance.
        auto no_ds = v;
        no_ds.deepstack.clear();
        const double moved = ddo::test::max_abs(
            text::qwen3_last_hidden_before_norm(*w, c, ids, mask, &no_ds, at::kFloat, at::kCPU).index({keep}), want.index({keep}));
        EXPECT_GT(moved, 100 * kTol) << name;
        std::cout << "[ tower     ] " << name << ": " << v.grid_thw.size() << " image(s), " << v.embeds.size(0)
                  << " image tokens, " << v.deepstack.size() << " deepstack, [" << ids.size(0) << ", " << ids.size(1)
                  << "] max |diff| " << d << " (without deepstack: " << moved << ")\n";
    }
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Qwen3VlTextParity, EveryRouteEqualsResident) {
    auto c = config();
    auto f = TensorFile::open_file(kDir / "text_tower.safetensors");
    const std::string name = "batch";
    const auto ids = f.read(name + ".input_ids"), mask = f.read(name + ".attention_mask");
    const auto v = vision(f, name);
    auto ref_w = weights(ddo::Route::resident);
    const auto want = text::qwen3_last_hidden_before_norm(*ref_w, c, ids, mask, &v, at::kFloat, at::kCPU);
    ref_w->finish();
    for (auto route : {ddo::Route::component, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                       ddo::Route::group_leaf}) {
        auto w = weights(route, 1e-6);
        const auto got = text::qwen3_last_hidden_before_norm(*w, c, ids, mask, &v, at::kFloat, at::kCPU);
        EXPECT_EQ(w->finish(), 0u) << w->route();
        EXPECT_TRUE(at::equal(want, got)) << w->route() << " differs from resident";
        if (route == ddo::Route::component)
            EXPECT_GT(w->report().at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u);
        else
            EXPECT_GT(w->bytes_streamed(), 0u) << w->route();
        std::cout << "[ routes    ] text_encoder with images " << w->route() << " == resident bitwise; bytes moved "
                  << w->bytes_streamed() << "\n";
    }
}

TEST_F(Qwen3VlTextParity, APadCountThatDoesNotMatchTheFeaturesIsRefused) {
    auto c = config();
    auto f = TensorFile::open_file(kDir / "text_tower.safetensors");
    auto w = weights(ddo::Route::resident);
    const auto ids = f.read("three.input_ids"), mask = f.read("three.attention_mask");
    const auto run = [&](const text::VisionTokens & v) {
        return ddo::test::error_of([&] { (void)text::qwen3_last_hidden_before_norm(*w, c, ids, mask, &v, at::kFloat, at::kCPU); });
    };
    auto fewer = vision(f, "three");  // one embedding short
    fewer.embeds = fewer.embeds.narrow(0, 0, fewer.embeds.size(0) - 1);
    for (auto & d : fewer.deepstack) d = d.narrow(0, 0, d.size(0) - 1);
    auto e = run(fewer);
    EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
    EXPECT_NE(e.find("<|image_pad|> tokens"), std::string::npos) << e;
    auto two = vision(f, "three");  // a grid short: the third slot has no image
    two.grid_thw.pop_back();
    e = run(two);
    EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
    auto swapped = vision(f, "three");  // the grids out of order: a run whose length is not its grid's
    std::swap(swapped.grid_thw[0], swapped.grid_thw[1]);
    e = run(swapped);
    EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
    EXPECT_NE(e.find("pad tokens for a grid"), std::string::npos) << e;
    std::cout << "[ refused   ] " << e << "\n";
    w->finish();
}

}  // namespace
