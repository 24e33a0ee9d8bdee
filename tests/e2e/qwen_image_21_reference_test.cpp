// ddo-host with condition images on a checkpoint saved whole with its Qwen3-VL vision tower
// (tools/reference/qwen_image_21_reference_fixtures.py): the PNG equals QwenImage21Pipeline(prompt=..., image=[...])
// with the same seed (<= 1/255) for one and three references of different sizes and ratios, RGB and RGBA, guidance
// on and off, the prefix KV cache on and off, the size from the last reference or given; the vision tower and the
// transformer on streamed routes give the same bytes as resident; the report records the references, their
// preprocessing, the template and the phases. Bad references are refused before anything loads (exit 2), the
// report written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kDir = QI21_REF_FIXTURE_DIR;

struct RefRun : ddo::test::HostRun {
    std::vector<ddo::test::Png> images;  // image.png, or image_0.png, image_1.png, ... with --num-images
    ddo::test::Png image;                // the first
};

std::string q(const std::string & s) { return "'" + s + "'"; }

RefRun run(const std::string & tag, const std::string & args, const std::string & checkpoint = "checkpoint") {
    RefRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "ref_" + tag, "--plugin qwen_image --model " + q((kDir / checkpoint).string()) + " " + args,
        [&](const fs::path & dir) {
            if (fs::exists(dir / "image.png")) r.images.push_back(ddo::test::read_png(dir / "image.png"));
            for (int i = 0; fs::exists(dir / ("image_" + std::to_string(i) + ".png")); ++i)
                r.images.push_back(ddo::test::read_png(dir / ("image_" + std::to_string(i) + ".png")));
            if (!r.images.empty()) r.image = r.images.front();
        });
    return r;
}

const nlohmann::json & reference() {
    static nlohmann::json j = nlohmann::json::parse(std::ifstream(kDir / "reference.json"));
    return j;
}

std::string image_args(const nlohmann::json & names) {
    std::string a;
    for (const auto & n : names) a += " --image " + q((kDir / "refs" / (n.get<std::string>() + ".png")).string());
    return a;
}

// The run's flags as the fixture recorded them.
std::string args_of(const nlohmann::json & r) {
    std::string a = "-p " + q(r.at("prompt").get<std::string>()) + image_args(r.at("images")) + " --seed " +
                    std::to_string(r.at("seed").get<int>()) + " --steps " + std::to_string(r.at("steps").get<int>()) +
                    " --cfg-scale " + std::to_string(r.at("true_cfg_scale").get<double>()) +
                    " --set plugin.qwen_image_21.output_resolution=" +
                    std::to_string(reference().at("output_resolution").get<int>());
    if (!r.at("negative_prompt").is_null()) a += " -n " + q(r.at("negative_prompt").get<std::string>());
    if (r.contains("width")) a += " --width " + std::to_string(r.at("width").get<int>());
    if (r.contains("height")) a += " --height " + std::to_string(r.at("height").get<int>());
    if (!r.at("use_kv_cache").get<bool>()) a += " --set plugin.qwen_image_21.use_kv_cache=false";
    if (r.contains("num_images")) a += " --num-images " + std::to_string(r.at("num_images").get<int>());
    return a;
}

// The largest difference over every image of the run against the pipeline's images (num_images_per_prompt).
int max_diff(const RefRun & r, const std::string & name) {
    const auto want = ddo::qwen_image_21::TensorFile::open_file(kDir / "pipeline_refs.safetensors").read(name + ".pixels");
    EXPECT_EQ(int64_t(r.images.size()), want.size(0)) << name << ": images written";
    if (int64_t(r.images.size()) != want.size(0)) return 256;
    int d = 0;
    for (int64_t k = 0; k < want.size(0); ++k) {
        const auto & img = r.images[size_t(k)];
        EXPECT_EQ(int64_t(img.height), want.size(1)) << name;
        EXPECT_EQ(int64_t(img.width), want.size(2)) << name;
        if (int64_t(img.pixels.size()) != want[k].numel()) return 256;
        const auto w = want[k].contiguous();
        const uint8_t * p = w.data_ptr<uint8_t>();
        for (size_t i = 0; i < img.pixels.size(); ++i) d = std::max(d, std::abs(int(img.pixels[i]) - int(p[i])));
    }
    return d;
}

bool has_phase(const nlohmann::json & report, const std::string & name) {
    for (const auto & p : report.at("phases"))
        if (p.value("name", "") == name) return true;
    return false;
}

class Qi21Ref : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json"))
            GTEST_SKIP() << kDir << "/reference.json missing: build target qwen_image_21_reference_fixtures";
    }
};

}  // namespace

TEST_F(Qi21Ref, EveryReferenceRunEqualsTheDiffusersPipeline) {
    for (const auto & [name, ref] : reference().at("runs").items()) {
        auto r = run(name, args_of(ref) + " --preset off.toml");
        ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.log;
        const int d = max_diff(r, name);
        EXPECT_LE(d, 1) << name << ": PNG vs QwenImage21Pipeline(prompt=..., image=[...])";
        const auto & wl = r.report.at("workload");
        EXPECT_EQ(wl.at("references").size(), ref.at("images").size()) << wl.dump();
        EXPECT_EQ(wl.at("width").get<int>(), ref.at("output_width").get<int>()) << name;
        EXPECT_EQ(wl.at("height").get<int>(), ref.at("output_height").get<int>()) << name;
        EXPECT_NE(wl.at("prompt_template").get<std::string>().find("ti2i"), std::string::npos) << wl.dump();
        EXPECT_EQ(wl.at("kv_cache_used").get<bool>(), ref.at("use_kv_cache").get<bool>()) << name;
        const auto & inputs = r.report.at("identity").at("checkpoint").at("inputs");
        EXPECT_TRUE(inputs.at("image_0").contains("preprocess")) << inputs.dump();
        for (const char * phase : {"encode_vision", "encode", "encode_image", "denoise", "decode"})
            EXPECT_TRUE(has_phase(r.report, phase)) << name << ": phase " << phase;
        EXPECT_EQ(r.report.at("counters").at("vision_tower").at("unloaded_in_phase").get<std::string>(), "encode_vision");
        std::cout << "[ reference ] " << name << " (" << ref.at("images").size() << " image(s), cfg "
                  << ref.at("true_cfg_scale") << ", kv cache " << ref.at("use_kv_cache") << "): max pixel difference "
                  << d << "/255 vs diffusers\n";
    }
}

// diffusers' own test config (test_qwenimage21.py get_dummy_components: mrope_section [1, 1, 2], deepstack [0], a
// 64-entry position table, axes_dims_rope (4, 6, 6)) on its test_inference_with_condition_image call.
TEST_F(Qi21Ref, DiffusersOwnTestConfigWithAConditionImage) {
    const auto & t = reference().at("diffusers_test");
    auto r = run("diffusers_test",
                 "-p " + q(t.at("prompt").get<std::string>()) + " -n " + q(t.at("negative_prompt").get<std::string>()) +
                     image_args(t.at("images")) + " --steps 2 --cfg-scale 1 --seed 0 --width 32 --height 32 --set "
                     "plugin.qwen_image_21.output_resolution=32 --preset off.toml",
                 t.at("checkpoint").get<std::string>());
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const int d = max_diff(r, "diffusers_test");
    EXPECT_LE(d, 1) << "diffusers' test config: PNG vs QwenImage21Pipeline";
    std::cout << "[ reference ] diffusers test config: max pixel difference " << d << "/255\n";
}

TEST_F(Qi21Ref, StreamedRoutesOfTheVisionTowerAndTransformerGiveTheSameBytes) {
    const auto & ref = reference().at("runs").at("three_cfg");
    auto resident = run("routes_resident", args_of(ref) + " --preset off.toml");
    ASSERT_EQ(resident.exit_code, 0) << resident.log;
    // low_ram_safe streams the transformer (dynamic) and keeps the small vision tower whole per phase (component);
    // the explicit disk routes stream both from the file.
    struct Case {
        std::string args, vision_route;
    };
    for (const Case & c : {Case{" --preset low_ram_safe.toml", "component"},
                           Case{" --preset off.toml --set components.vision_tower.route=disk "
                                "--set components.transformer.route=disk", "disk"}}) {
        auto r = run("routes_streamed", args_of(ref) + c.args);
        ASSERT_EQ(r.exit_code, 0) << c.args << "\n" << r.log;
        EXPECT_EQ(r.image.pixels, resident.image.pixels) << c.args << ": not the resident route's bytes";
        const auto & v = r.report.at("counters").at("vision_tower");
        const auto & t = r.report.at("counters").at("transformer");
        EXPECT_EQ(v.at("route").get<std::string>(), c.vision_route) << v.dump();
        if (c.vision_route == "disk") {  // read from the file at every use (dynamic keeps what fits the CPU's memory)
            EXPECT_GT(v.at("bytes_streamed").get<uint64_t>(), 0u) << v.dump();
            EXPECT_GT(t.at("bytes_streamed").get<uint64_t>(), 0u) << t.dump();
        }
        EXPECT_NE(t.at("route").get<std::string>(), "resident") << t.dump();
        std::cout << "[ routes    ] vision_tower " << v.at("route") << " (" << v.at("bytes_streamed")
                  << " bytes streamed), transformer " << t.at("route") << " (" << t.at("bytes_streamed")
                  << "): bytes equal to resident\n";
    }
}

TEST_F(Qi21Ref, BadReferencesAreRefusedNamingWhatAndTheReportIsWritten) {
    const auto & ref = reference().at("runs").at("one_rgb");
    const fs::path tmp = fs::temp_directory_path() / ("qi21_bad_refs_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    {
        std::ofstream(tmp / "corrupt.png", std::ios::binary) << "\x89PNG\r\n\x1a\nnot really a png";
        std::ofstream(tmp / "e.safetensors", std::ios::binary) << "not read: refused before";
    }
    std::string eleven;
    for (int i = 0; i < 11; ++i) eleven += image_args(nlohmann::json::array({"square_rgb"}));
    struct Case {
        std::string tag, args, says;
    };
    const std::string base = "--steps 2 --set plugin.qwen_image_21.output_resolution=96";
    const std::vector<Case> cases = {
        {"eleven", "-p 'x' " + eleven + " " + base, "up to 10"},
        {"corrupt", "-p 'x' --image " + q((tmp / "corrupt.png").string()) + " " + base, "corrupt.png"},
        {"missing", "-p 'x' --image " + q((tmp / "nope.png").string()) + " " + base, "nope.png"},
        {"frame", "-p 'x' --image " + q((kDir / "refs" / "square_rgb.png").string()) + "@4 " + base, "no frame"},
        {"strength", args_of(ref) + " --strength 0.5", "strength"},
        {"pad_in_prompt", "-p 'see <|image_pad|> here'" + image_args(ref.at("images")) + " " + base, "<|image_pad|>"},
        {"embeds", "--prompt-embeds " + q((tmp / "e.safetensors").string()) + image_args(ref.at("images")) + " " + base,
         "text encoder must see"},
        {"resolution", args_of(ref) + " --set plugin.qwen_image_21.output_resolution=16", "output_resolution"},
        {"sliver", "-p 'x'" + image_args(nlohmann::json::array({"sliver_rgb"})) + " " + base, "at least 32 pixels"},
    };
    for (const auto & c : cases) {
        auto r = run("bad_" + c.tag, c.args);
        EXPECT_EQ(r.exit_code, 2) << c.tag << "\n" << r.log;
        EXPECT_NE(r.log.find(c.says), std::string::npos) << c.tag << ": the message does not say '" << c.says << "'\n"
                                                         << r.log;
        ASSERT_TRUE(r.report.is_object()) << c.tag << ": no report";
        EXPECT_EQ(r.report.at("status").get<std::string>(), "failed") << c.tag;
        EXPECT_TRUE(r.report.at("outputs").empty()) << c.tag;
    }
    fs::remove_all(tmp);
}
