// ddo-host --plugin ltx2_image --image FILE --strength S on the img2img fixtures (tools/reference/
// ltx2_image_img2img_fixtures.py: the reference composed from diffusers' modules as DEVAIEXP's
// LTX2ImageImg2ImgPipeline, checked there against the original's order; Note [LTX-2 image img2img]): the input PNG
// (30x40) resized with PIL's LANCZOS to 32x24, encoded by the video VAE's encoder, the posterior sampled, noised at
// the strength's first sigma and refined: image.png equals the reference's image within 1/255 at strengths 0.2 and
// 0.6 (8 steps); the report records the image (file, decoded facts, preprocess) and the img2img facts (strength,
// t_start, the kept schedule, noise sigma); the DiT on the resident, dynamic and disk routes writes the same pixels;
// more than one image, a strength outside (0, 1], --strength without --image, @FRAME and workload.sigmas with an
// image are refused with exit 2 before anything loads.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "ddo/model/tensor_file.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kFixtures = LTX2_IMAGE_IMG2IMG_FIXTURE_DIR;

const nlohmann::json & reference() {
    static const nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json"));
    return j;
}

// The case as ddo-host flags; `extra`: more flags.
std::string case_args(const std::string & name, const std::string & extra = "") {
    const auto & k = reference().at("cases").at(name);
    return "--plugin ltx2_image --model " + quoted(kFixtures / "checkpoint") + " --prompt-embeds " +
           quoted(kFixtures / "prompt_embeds.safetensors") + " --image " + quoted(kFixtures / "input.png") +
           " --strength " + nlohmann::json(k.at("strength")).dump() + " --seed " +
           std::to_string(reference().at("seed").get<int>()) + " --width " + std::to_string(k.at("width").get<int>()) +
           " --height " + std::to_string(k.at("height").get<int>()) + " --steps " +
           std::to_string(k.at("steps").get<int>()) + " --cfg-scale 1 " + extra;
}

// Largest |png - reference| in 1/255 units; 1e9 when the sizes differ.
double png_error(const fs::path & png_file, const std::string & name) {
    const auto png = ddo::test::read_png(png_file);
    const auto want = ddo::model::TensorFile::open_file(kFixtures / ("img2img_" + name + ".safetensors"))
                          .read("image")
                          .to(at::kDouble)
                          .contiguous();
    EXPECT_EQ(png.channels, 3) << png_file;
    if (png.channels != 3 || int64_t(png.height) != want.size(1) || int64_t(png.width) != want.size(2)) return 1e9;
    const auto got = at::from_blob(const_cast<uint8_t *>(png.pixels.data()), {want.size(1), want.size(2), 3}, at::kByte)
                         .permute({2, 0, 1})
                         .to(at::kDouble);
    return (got - want * 255).abs().max().item<double>();
}

}  // namespace

TEST(Ltx2ImageImg2ImgHost, EachStrengthEqualsTheReference) {
    for (const auto & [name, k] : reference().at("cases").items()) {
        const auto r = run_ddo_host("ltx2_image_img2img_" + name, case_args(name), [&](const fs::path & dir) {
            const double e = png_error(dir / "image.png", name);
            std::cout << "[ parity    ] img2img strength " << k.at("strength") << ": image.png vs the composed "
                      << "reference: max abs error " << e << "/255 (tolerance 1/255)\n";
            EXPECT_LE(e, 1.0) << name;
        });
        ASSERT_EQ(r.exit_code, 0) << r.log;
        const auto & w = r.report.at("workload");
        const auto & i2i = w.at("img2img");
        EXPECT_EQ(i2i.at("strength"), k.at("strength")) << i2i.dump();
        EXPECT_EQ(i2i.at("t_start"), k.at("t_start")) << i2i.dump();
        EXPECT_EQ(i2i.at("steps_requested"), k.at("steps")) << i2i.dump();
        EXPECT_EQ(i2i.at("posterior"), "sample");
        EXPECT_EQ(w.at("steps"), k.at("kept_steps")) << w.dump();
        const auto & sig = k.at("sigmas");
        EXPECT_FLOAT_EQ(i2i.at("noise_sigma").get<float>(), sig[0].get<float>()) << i2i.dump();
        const auto & img = r.report.at("identity").at("checkpoint").at("inputs").at("image_0");
        const auto & pre = img.at("preprocess");
        EXPECT_EQ(pre.at("filter"), "lanczos") << img.dump();
        EXPECT_EQ(pre.at("width"), k.at("width")) << img.dump();
        EXPECT_EQ(pre.at("height"), k.at("height")) << img.dump();
        EXPECT_EQ(pre.at("source_width"), k.at("input")[1]) << img.dump();
        EXPECT_EQ(pre.at("source_height"), k.at("input")[0]) << img.dump();
        const auto & phases = r.report.at("phases");
        bool encode_phase = false;
        for (const auto & p : phases)
            if (p.at("name") == "encode_image") encode_phase = true;
        EXPECT_TRUE(encode_phase) << phases.dump();
        std::cout << "[ report    ] " << name << ": workload.img2img " << i2i.dump() << "; preprocess " << pre.dump()
                  << "\n";
    }
}

TEST(Ltx2ImageImg2ImgHost, DitRoutesWriteTheSamePixels) {
    std::map<std::string, std::vector<uint8_t>> pixels;
    for (const char * route : {"resident", "dynamic", "disk"}) {
        std::string extra = std::string("--set components.transformer.route=") + route;
        if (std::string(route) == "dynamic") extra += " --set components.transformer.resident_budget_gb=0.00007";
        const auto r = run_ddo_host(std::string("ltx2_image_img2img_route_") + route, case_args("s060", extra),
                                    [&](const fs::path & dir) {
                                        pixels[route] = ddo::test::read_png(dir / "image.png").pixels;
                                    });
        ASSERT_EQ(r.exit_code, 0) << route << "\n" << r.log;
        EXPECT_EQ(r.report.at("routes").at("transformer").at("executed"), route);
        std::cout << "[ routes    ] img2img 0.6, transformer on " << route << "\n";
    }
    ASSERT_FALSE(pixels["resident"].empty());
    EXPECT_TRUE(pixels["dynamic"] == pixels["resident"]) << "dynamic route: other pixels";
    EXPECT_TRUE(pixels["disk"] == pixels["resident"]) << "disk route: other pixels";
}

TEST(Ltx2ImageImg2ImgHost, BadRequestsExit2BeforeLoading) {
    const std::string png = quoted(kFixtures / "input.png");
    const std::string base = "--plugin ltx2_image --model " + quoted(kFixtures / "checkpoint") + " --prompt-embeds " +
                             quoted(kFixtures / "prompt_embeds.safetensors") + " --width 24 --height 32 --steps 8";
    const std::pair<std::string, std::string> cases[] = {
        {case_args("s020", "--image " + png), "img2img refines one image"},
        {base + " --image " + png + " --strength 0", "workload.strength"},
        {base + " --image " + png + " --strength 1.5", "workload.strength"},
        {case_args("s020", "--set 'workload.sigmas=[1.0,0.5]'"), "workload.sigmas"},
    };
    for (const auto & [args, needle] : cases) {
        const auto r = run_ddo_host("ltx2_image_img2img_bad", args);
        EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.log;
        EXPECT_NE(r.log.find(needle), std::string::npos) << needle << "\n" << r.log;
        if (r.report.is_object()) {
            EXPECT_EQ(r.report.at("status"), "failed") << args;
        }
        std::cout << "[ refusal   ] " << r.log.substr(0, r.log.find('\n')) << "\n";
    }
    auto r = run_ddo_host("ltx2_image_img2img_no_image", base + " --strength 0.5");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("give --image FILE"), std::string::npos) << r.log;
    r = run_ddo_host("ltx2_image_img2img_frame", base + " --image " + quoted(fs::path((kFixtures / "input.png").string() + "@3")));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("@FRAME"), std::string::npos) << r.log;
}
