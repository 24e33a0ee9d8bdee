// What a qwen_image_21 run leaves behind, through ddo-host on the parity fixtures: the PNG (its channel count is
// the VAE's: an RGB VAE writes an RGB PNG whose pixels equal diffusers' output, an RGBA VAE an RGBA one; text
// chunks tie it to its run) and the report's checkpoint identity (equal across runs of the same checkpoint).
#include <gtest/gtest.h>


#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "ddo/util/file_digest.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = QI21_FIXTURE_DIR;

using ddo::test::Png;
using ddo::test::read_png;

struct OutputsRun : ddo::test::HostRun {
    Png image;
};

OutputsRun run_host(const std::string & tag, const fs::path & model, const std::string & extra) {
    OutputsRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "outputs_" + tag,
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + model.string() + "' --prompt-embeds '" +
            (kFixtures / "prompt_embeds.safetensors").string() + "' " + extra,
        [&](const fs::path & dir) { r.image = read_png(dir / "image.png"); });
    return r;
}

class Qi21Outputs : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(fs::exists(kFixtures / "checkpoint_rgb" / "model_index.json"))
            << kFixtures << " has no checkpoint_rgb: build target qwen_image_21_fixtures (tools/ddo build)";
    }
};

}  // namespace

// Before the kit's writer, a 3-channel image was written as RGBA from a 3-channel buffer (a heap over-read).
TEST_F(Qi21Outputs, RgbVaeWritesAnRgbPngEqualToDiffusers) {
    const auto ref = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json")).at("pipeline_rgb");
    auto r = run_host("rgb", kFixtures / "checkpoint_rgb",
                      "--steps " + std::to_string(ref.at("steps").get<int>()) + " --width " +
                          std::to_string(ref.at("width").get<int>()) + " --height " +
                          std::to_string(ref.at("height").get<int>()) + " --seed " +
                          std::to_string(ref.at("seed").get<int>()) + " --set plugin.qwen_image_21.use_kv_cache=" +
                          (ref.at("use_kv_cache").get<bool>() ? "true" : "false"));
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto want = ddo::qwen_image_21::TensorFile::open_file(kFixtures / "pipeline_rgb.safetensors").read("rgb.pixels");
    ASSERT_EQ(want.dim(), 3);
    EXPECT_EQ(r.image.color_type, PNG_COLOR_TYPE_RGB);
    ASSERT_EQ(r.image.channels, 3);
    ASSERT_EQ(int64_t(r.image.height), want.size(0));
    ASSERT_EQ(int64_t(r.image.width), want.size(1));
    ASSERT_EQ(int64_t(r.image.pixels.size()), want.numel());
    const uint8_t * w = want.data_ptr<uint8_t>();
    int max_diff = 0;
    for (size_t i = 0; i < r.image.pixels.size(); ++i) max_diff = std::max(max_diff, std::abs(int(r.image.pixels[i]) - int(w[i])));
    EXPECT_LE(max_diff, 1) << "RGB PNG pixels vs QwenImage21Pipeline(output_type='np') rounded as numpy_to_pil";
    std::cout << "[ rgb png   ] " << r.image.width << "x" << r.image.height << "x3, max pixel difference " << max_diff
              << "/255 against diffusers\n";
    EXPECT_EQ(r.image.text["ddo:plugin"], "qwen_image_21");
    EXPECT_NE(r.image.text["ddo:report"].find("report.json"), std::string::npos);
    EXPECT_NO_THROW({
        [[maybe_unused]] const auto settings = nlohmann::json::parse(r.image.text["ddo:settings"]);
    });
    EXPECT_EQ(r.report.at("outputs").size(), 1u);
}

TEST_F(Qi21Outputs, RgbaVaeWritesAnRgbaPng) {
    std::string on_disk;
    OutputsRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "outputs_rgba",
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() + "' --prompt-embeds '" +
            (kFixtures / "prompt_embeds.safetensors").string() + "' --steps 2 --width 64 --height 64",
        [&](const fs::path & dir) {
            r.image = read_png(dir / "image.png");
            on_disk = ddo::file_sha256(dir / "image.png").value_or("");
            for (const auto & f : fs::directory_iterator(dir))  // written atomically: no temp file is left
                EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos) << f.path();
        });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    // The report hashes the bytes written, and they are the bytes on disk.
    EXPECT_EQ(r.report.at("outputs").at(0).at("sha256"), on_disk);
    EXPECT_GT(r.report.at("outputs").at(0).at("bytes").get<uint64_t>(), 0u);
    EXPECT_EQ(r.image.color_type, PNG_COLOR_TYPE_RGBA);
    EXPECT_EQ(r.image.channels, 4);
    EXPECT_EQ(r.image.width, 64u);
}

TEST_F(Qi21Outputs, TwoRunsOfOneCheckpointRecordTheSameIdentity) {
    auto a = run_host("id_a", kFixtures / "checkpoint", "--steps 1 --width 32 --height 32 --dry-run");
    auto b = run_host("id_b", kFixtures / "checkpoint", "--steps 1 --width 32 --height 32 --dry-run");
    ASSERT_EQ(a.exit_code, 0) << a.log;
    ASSERT_EQ(b.exit_code, 0) << b.log;
    const auto & ia = a.report.at("identity").at("checkpoint");
    const auto & ib = b.report.at("identity").at("checkpoint");
    EXPECT_EQ(ia.at("identity"), ib.at("identity"));
    EXPECT_EQ(ia.at("inputs"), ib.at("inputs"));
    const auto & tr = ia.at("identity").at("components").at("transformer");
    EXPECT_EQ(tr.at("files").size(), 1u);
    EXPECT_EQ(tr.at("files")[0].at("header_xxh3_128").get<std::string>().size(), 32u);
    EXPECT_FALSE(tr.at("files")[0].contains("sha256")) << "full content hashes are opt-in (--hash-weights)";
    EXPECT_EQ(ia.at("inputs").at("prompt_embeds").at("sha256").get<std::string>().size(), 64u);

    auto h = run_host("id_h", kFixtures / "checkpoint", "--steps 1 --width 32 --height 32 --dry-run --hash-weights");
    ASSERT_EQ(h.exit_code, 0) << h.log;
    const auto & th = h.report.at("identity").at("checkpoint").at("identity").at("components").at("transformer");
    EXPECT_EQ(th.at("files")[0].at("sha256").get<std::string>().size(), 64u);
    EXPECT_GE(th.at("hash_weights_s").get<double>(), 0.0);
    EXPECT_EQ(th.at("files")[0].at("header_xxh3_128"), tr.at("files")[0].at("header_xxh3_128"));
}

// --num-images 2 = diffusers' num_images_per_prompt = 2: image_0.png and image_1.png, each equal to its diffusers image.
TEST_F(Qi21Outputs, NumImagesPerPromptWritesEachImageEqualToDiffusers) {
    const auto ref = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json")).at("pipeline_multi");
    const auto want = ddo::qwen_image_21::TensorFile::open_file(kFixtures / "pipeline_multi.safetensors").read("multi.pixels");
    std::vector<Png> got;
    OutputsRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "outputs_multi",
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() + "' --prompt-embeds '" +
            (kFixtures / "prompt_embeds.safetensors").string() + "' --num-images 2 --steps " +
            std::to_string(ref.at("steps").get<int>()) + " --width 64 --height 64 --seed " + std::to_string(ref.at("seed").get<int>()),
        [&](const fs::path & dir) {
            for (int i = 0; i < 2; ++i) got.push_back(read_png(dir / ("image_" + std::to_string(i) + ".png")));
        });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    ASSERT_EQ(want.size(0), 2);
    EXPECT_EQ(r.report.at("outputs").size(), 2u);
    EXPECT_EQ(r.report.at("workload").at("num_images"), 2);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(int64_t(got[size_t(i)].pixels.size()), want[i].numel()) << "image " << i;
        const uint8_t * w = want[i].contiguous().data_ptr<uint8_t>();
        int max_diff = 0;
        for (size_t k = 0; k < got[size_t(i)].pixels.size(); ++k)
            max_diff = std::max(max_diff, std::abs(int(got[size_t(i)].pixels[k]) - int(w[k])));
        EXPECT_LE(max_diff, 1) << "image " << i << " vs QwenImage21Pipeline(num_images_per_prompt=2)";
        std::cout << "[ images    ] image_" << i << ".png: max pixel difference " << max_diff << "/255 against diffusers\n";
    }
}
