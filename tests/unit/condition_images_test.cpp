// condition_images_test: the model kit's condition images (ModelRun::condition_images, condition_image.hpp), on a
// ModelRun over hand-made settings and a PNG the test writes:
// - "PATH[@FRAME]": the frame after the last '@' (a path with '@' and no digits stays whole), an empty path refused;
// - a path in a preset file is relative to that file; the image is decoded; inputs.image_<i> in the report holds
//   file, sha256, frame and the decoded facts, and record_image_preprocess merges the plugin's preprocess;
// - a file that is not an image is refused (UsageError naming it) and is already in the report's inputs;
// - workload.strength 0 (and 1.5) is refused naming the key and (0, 1] (an accepted strength: qwen_image_21_cli_test);
// - image_to_tensor: [1, 3, H, W] float, 2 (x / 255) - 1, channels first; alpha dropped unless kept.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/condition_image.hpp"
#include "ddo/model/model_run.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/run_context.hpp"

namespace fs = std::filesystem;
using namespace ddo;

namespace {

void put32(std::vector<std::uint8_t> & b, std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
}
void chunk(std::vector<std::uint8_t> & png, const char * type, const std::vector<std::uint8_t> & data) {
    put32(png, std::uint32_t(data.size()));
    std::vector<std::uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    png.insert(png.end(), td.begin(), td.end());
    put32(png, std::uint32_t(crc32(0, td.data(), uInt(td.size()))));
}
// A 4x2 8-bit RGB PNG whose pixel i has the value 10 * i in every channel.
void write_png(const fs::path & p) {
    std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    std::vector<std::uint8_t> ihdr;
    put32(ihdr, 4);
    put32(ihdr, 2);
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
    chunk(out, "IHDR", ihdr);
    std::vector<std::uint8_t> raw;
    for (int y = 0; y < 2; ++y) {
        raw.push_back(0);
        for (int x = 0; x < 4; ++x) raw.insert(raw.end(), 3, std::uint8_t(10 * (y * 4 + x)));
    }
    uLongf n = compressBound(uLong(raw.size()));
    std::vector<std::uint8_t> z(n);
    compress(z.data(), &n, raw.data(), uLong(raw.size()));
    z.resize(n);
    chunk(out, "IDAT", z);
    chunk(out, "IEND", {});
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(out.data()), std::streamsize(out.size()));
}

struct Fixture {
    fs::path dir = fs::temp_directory_path() / ("ddo_condition_images_" + std::to_string(::getpid()));
    ResolvedSettings settings;
    RunTracker tracker;
    RunContext ctx;
    Fixture() {
        fs::remove_all(dir);
        fs::create_directories(dir / "presets" / "images");
        fs::create_directories(dir / "model");
        ctx.settings = &settings;
        ctx.tracker = &tracker;
        ctx.model_dir = dir / "model";
    }
    ~Fixture() { fs::remove_all(dir); }
    void set(const std::string & key, nlohmann::json v, SettingLayer layer, const std::string & source) {
        ResolvedValue rv;
        rv.value = std::move(v);
        rv.provenance.layer = layer;
        rv.provenance.source = source;
        settings.set(key, rv);
    }
    nlohmann::json inputs() const { return tracker.to_json()["identity"]["checkpoint"]["inputs"]; }
};

TEST(ConditionImages, ParsePathAndFrame) {
    auto r = model::parse_condition_image("a/b.png@12", "--image");
    EXPECT_EQ(r.path, "a/b.png");
    EXPECT_EQ(r.frame, 12);
    r = model::parse_condition_image("me@home.png", "--image");
    EXPECT_EQ(r.path, "me@home.png");
    EXPECT_EQ(r.frame, 0);
    EXPECT_THROW(model::parse_condition_image("@3", "--image"), UsageError);
    EXPECT_THROW(model::parse_condition_image("x.png@12345678901", "--image"), UsageError);
}

TEST(ConditionImages, ReadRecordedAndRelativeToThePreset) {
    Fixture f;
    write_png(f.dir / "presets" / "images" / "cond.png");
    f.set("workload.images", nlohmann::json::array({"images/cond.png@8"}), SettingLayer::preset,
          (f.dir / "presets" / "mine.toml").string());
    model::ModelRun run(f.ctx, "test_plugin", {});
    run.record_checkpoint({});
    const auto images = run.condition_images();
    ASSERT_EQ(images.size(), 1u);
    EXPECT_EQ(images[0].frame, 8);
    EXPECT_EQ(images[0].image.width, 4);
    EXPECT_EQ(images[0].image.pixels[3 * 5], 50);
    run.record_image_preprocess(0, {{"resize", "bilinear"}, {"width", 32}, {"height", 32}, {"crf", 33}});
    const auto in = f.inputs().at("image_0");
    std::cout << "[ recorded  ] " << in.dump() << "\n";
    EXPECT_EQ(in.at("frame"), 8);
    EXPECT_EQ(in.at("format"), "png");
    EXPECT_EQ(in.at("source_width"), 4);
    EXPECT_EQ(in.at("bit_depth"), 8);
    EXPECT_EQ(in.at("source_channels"), 3);
    EXPECT_EQ(in.at("orientation"), 1);
    EXPECT_EQ(in.at("sha256").get<std::string>().size(), 64u);
    EXPECT_EQ(in.at("preprocess").at("crf"), 33);
    // The tensor VaeImageProcessor hands the VAE.
    const at::Tensor t = model::image_to_tensor(images[0].image);
    EXPECT_EQ(t.sizes(), (at::IntArrayRef{1, 3, 2, 4}));
    EXPECT_FLOAT_EQ(t[0][1][1][1].item<float>(), 2.0f * (50.0f / 255.0f) - 1.0f);
}

TEST(ConditionImages, ARefusedFileIsInTheReport) {
    Fixture f;
    std::ofstream(f.dir / "notes.png") << "just text";
    f.set("workload.images", (f.dir / "notes.png").string(), SettingLayer::command_line, "--set");
    model::ModelRun run(f.ctx, "test_plugin", {});
    run.record_checkpoint({});
    std::string msg;
    try {
        run.condition_images();
    } catch (const UsageError & e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find((f.dir / "notes.png").string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("not an image"), std::string::npos) << msg;
    EXPECT_TRUE(f.inputs().contains("image_0")) << f.inputs().dump();
    f.set("workload.images", (f.dir / "missing.png").string(), SettingLayer::command_line, "--set");
    EXPECT_THROW(run.condition_images(), UsageError);
}

TEST(ConditionImages, StrengthZeroIsRefused) {
    Fixture f;
    f.set("workload.strength", 0.0, SettingLayer::command_line, "--set");
    model::ModelRun run(f.ctx, "test_plugin", {});
    std::string msg;
    try {
        run.workload({});
    } catch (const UsageError & e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("workload.strength"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(0, 1]"), std::string::npos) << msg;
    f.set("workload.strength", 1.5, SettingLayer::command_line, "--set");  // the resolver's range refuses it first
    EXPECT_THROW(run.workload({}), UsageError);                            // in a real run; the kit does too
}

TEST(ConditionImages, TensorDropsAlphaUnlessKept) {
    media::DecodedImage im;
    im.width = 1, im.height = 1, im.channels = 4, im.has_alpha = true;
    im.pixels = {0, 255, 51, 102};
    const at::Tensor rgb = model::image_to_tensor(im);
    EXPECT_EQ(rgb.sizes(), (at::IntArrayRef{1, 3, 1, 1}));
    EXPECT_FLOAT_EQ(rgb[0][0][0][0].item<float>(), -1.0f);
    EXPECT_FLOAT_EQ(rgb[0][1][0][0].item<float>(), 1.0f);
    EXPECT_EQ(model::image_to_tensor(im, true).size(1), 4);
    EXPECT_EQ(model::rgb_of(im).pixels, (std::vector<std::uint8_t>{0, 255, 51}));
}

}  // namespace
