// ddo-host --plugin ltx2_image on the image fixtures (tools/reference/ltx2_image_fixtures.py: the composed diffusers
// LTX-2 image reference): from a prompt (-p) the PNG equals the reference's image from the same text within 1/255,
// with the Gemma-3 text encoder streamed (bytes in the report) and unloaded in phase encode before the connectors
// and the DiT; `ddo-host encode` writes the embeddings (equal to diffusers' _get_gemma_prompt_embeds within 1e-5)
// and a run from them writes the same pixels; the DiT on the resident, dynamic and disk routes writes the same
// pixels (equal to the base + PAG reference within 1/255; the PNG files differ only in their text chunks, which
// record the settings and the report path); malformed checkpoints (a tensor missing, a wrong shape, an audio+video
// DiT's weights, a text encoder the connectors do not read) fail before denoising with exit 4, the tensor (or key)
// and the file named and the report written; a video (LTX2Pipeline) checkpoint is refused with exit 2 naming the
// plugin that takes it; -p with --prompt-embeds, -n without -p and -p without a text encoder are refused (exit 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "ddo/model/tensor_file.hpp"
#include "ddo/model/tensor_output.hpp"
#include "e2e/host_run.hpp"
#include "e2e/ltx2_e2e_support.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kFixtures = LTX2_IMAGE_FIXTURE_DIR;

const nlohmann::json & reference() {
    static const nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json"));
    return j;
}

// A case of reference.json as ddo-host flags (plugin options = the image pipeline's arguments).
std::string case_args(const std::string & name) {
    const auto & k = reference().at("cases").at(name);
    const auto & s = k.at("settings");
    std::string a = " --seed " + std::to_string(reference().at("seed").get<int>()) + " --width " +
                    std::to_string(k.at("width").get<int>()) + " --height " + std::to_string(k.at("height").get<int>()) +
                    " --steps " + std::to_string(s.at("steps").get<int>()) + " --cfg-scale " +
                    nlohmann::json(s.at("guidance_scale")).dump() + " --set plugin.ltx2_image.guidance_rescale=" +
                    nlohmann::json(s.at("guidance_rescale")).dump() + " --set plugin.ltx2_image.pag_scale=" +
                    nlohmann::json(s.at("pag_scale")).dump();
    if (s.at("pag_scale").get<double>() > 0)
        a += " --set 'plugin.ltx2_image.pag_applied_layers=" + s.at("pag_blocks").dump() + "'";
    if (s.contains("max_sequence_length"))
        a += " --set plugin.ltx2_image.max_sequence_length=" + std::to_string(s.at("max_sequence_length").get<int>());
    return a;
}

// The "text" case from `source` (-p or --prompt-embeds) on `ckpt` (extra: more flags).
std::string text_args(const std::string & source, const std::string & extra = "",
                      const fs::path & ckpt = kFixtures / "checkpoint_text") {
    return "--plugin ltx2_image --model " + quoted(ckpt) + " " + source + case_args("text") + " " + extra;
}

std::string prompt_flag() {
    return "-p '" + reference().at("cases").at("text").at("settings").at("prompt").get<std::string>() + "'";
}

// The base + PAG case from prompt embeddings on `ckpt`.
std::string embeds_args(const fs::path & ckpt, const std::string & extra = "") {
    return "--plugin ltx2_image --model " + quoted(ckpt) + " --prompt-embeds " +
           quoted(kFixtures / "prompt_embeds.safetensors") +
           case_args("base_pag") + " " + extra;
}

// Largest |png - reference| in 1/255 units (the reference: image [3, H, W] in [0, 1]); 1e9 when the sizes differ.
double png_error(const fs::path & png_file, const std::string & fixture) {
    const auto png = ddo::test::read_png(png_file);
    const auto want = ddo::model::TensorFile::open_file(kFixtures / fixture).read("image").to(at::kDouble).contiguous();
    EXPECT_EQ(png.channels, 3) << png_file;
    if (png.channels != 3 || int64_t(png.height) != want.size(1) || int64_t(png.width) != want.size(2)) return 1e9;
    const auto got = at::from_blob(const_cast<uint8_t *>(png.pixels.data()), {want.size(1), want.size(2), 3}, at::kByte)
                         .permute({2, 0, 1})
                         .to(at::kDouble);
    return (got - want * 255).abs().max().item<double>();
}

}  // namespace

TEST(Ltx2ImageHost, FromTextEqualsReferenceAndEncodeReproducesIt) {
    std::vector<uint8_t> pixels_text;
    const auto r = run_ddo_host("ltx2_image_text", text_args(prompt_flag(), "--preset low_ram_safe.toml"),
                                [&](const fs::path & dir) {
        const double e = png_error(dir / "image.png", "image_text.safetensors");
        std::cout << "[ parity    ] -p: image.png vs the composed reference's image from the prompt: max abs error "
                  << e << "/255 (tolerance 1/255)\n";
        EXPECT_LE(e, 1.0);
        pixels_text = ddo::test::read_png(dir / "image.png").pixels;
    });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & rep = r.report;
    const auto & te = rep.at("counters").at("text_encoder");
    EXPECT_EQ(te.at("unloaded_in_phase"), "encode") << "the text encoder leaves memory before the connectors and the DiT";
    EXPECT_EQ(te.at("engine").at("counters").at("outstanding_owners"), 0);
    EXPECT_GT(te.at("bytes_streamed").get<uint64_t>(), 0u) << "low_ram_safe streams the text encoder's layers";
    const std::pair<const char *, const char *> unloads[] = {{"connectors", "encode"}, {"transformer", "denoise"},
                                                             {"vae", "decode"}};
    for (const auto & [c, phase] : unloads) {
        EXPECT_EQ(rep.at("counters").at(c).at("unloaded_in_phase"), phase) << c;
        EXPECT_EQ(rep.at("counters").at(c).at("engine").at("counters").at("outstanding_owners"), 0) << c;
    }
    EXPECT_EQ(rep.at("workload").at("negative_prompt"), "") << "the default negative prompt under guidance";
    EXPECT_EQ(rep.at("workload").at("prompt_embeddings"), "encoded by the text encoder (Gemma-3)");
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(rep, &problems), (std::vector<std::string>{})) << "an image from a prompt uses every component";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    std::cout << "[ text      ] text encoder: " << te.at("bytes_streamed").get<uint64_t>()
              << " bytes streamed, unloaded in phase " << te.at("unloaded_in_phase").get<std::string>() << "\n";

    // ddo-host encode writes the embeddings (diffusers' _get_gemma_prompt_embeds); a run from them writes the same
    // pixels (the PNG's text chunks record the settings, which differ).
    const fs::path embeds = fs::temp_directory_path() / ("ltx2_image_embeds_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(embeds);
    const fs::path encode_report = embeds.string() + ".report.json";
    fs::remove(encode_report);
    const std::string cmd = std::string("'") + DDO_HOST_BIN + "' encode --plugin ltx2_image --model " +
                            quoted(kFixtures / "checkpoint_text") + " " + prompt_flag() + " -n '' --set " +
                            "plugin.ltx2_image.max_sequence_length=16 -o " + quoted(embeds) + " --report " +
                            quoted(encode_report) + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto er = nlohmann::json::parse(std::ifstream(encode_report));
    EXPECT_EQ(er.at("status"), "completed");
    EXPECT_EQ(er.at("outputs")[0].at("kind"), "application/x-safetensors");
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(er, &problems), (std::vector<std::string>{"connectors", "transformer", "vae"})) << "ddo-host encode runs Gemma-3 only";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    fs::remove(encode_report);
    const auto got = ddo::model::TensorFile::open_file(embeds);
    const auto want = ddo::model::TensorFile::open_file(kFixtures / "image_text.safetensors");
    for (const char * n : {"prompt_embeds", "negative_prompt_embeds"}) {
        const auto a = got.read(n), b = want.read(n);
        ASSERT_EQ(a.sizes(), b.sizes()) << n;
        const double e = (a - b).abs().max().item<double>();
        std::cout << "[ parity    ] ddo-host encode " << n << " vs diffusers' _get_gemma_prompt_embeds: max abs error "
                  << e << " (tolerance 1e-5)\n";
        EXPECT_LE(e, 1e-5) << n;
    }
    for (const char * n : {"prompt_attention_mask", "negative_prompt_attention_mask"})
        EXPECT_TRUE(at::equal(got.read(n), want.read(n))) << n;
    const auto again = run_ddo_host("ltx2_image_from_encoded", text_args("--prompt-embeds " + quoted(embeds)),
                                    [&](const fs::path & dir) {
        EXPECT_EQ(ddo::test::read_png(dir / "image.png").pixels, pixels_text) << "the same pixels as from -p";
    });
    EXPECT_EQ(again.exit_code, 0) << again.log;
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(again.report, &problems), (std::vector<std::string>{"text_encoder"})) << "embeddings from a file: no text encoder";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    fs::remove(embeds);
}

TEST(Ltx2ImageHost, TextRefusalsExit2) {
    // -p and --prompt-embeds together; -n without -p; encode without a prompt.
    auto r = run_ddo_host("ltx2_image_both", text_args(prompt_flag() + " --prompt-embeds " +
                                                       quoted(kFixtures / "prompt_embeds.safetensors")));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("Pass one of them"), std::string::npos) << r.log;
    r = run_ddo_host("ltx2_image_neg", embeds_args(kFixtures / "checkpoint", "-n 'blurry'"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("negative_prompt_embeds"), std::string::npos) << r.log;
    // -p on a checkpoint saved without its text encoder names the missing file.
    r = run_ddo_host("ltx2_image_no_te",
                     "--plugin ltx2_image --model " + quoted(kFixtures / "checkpoint") + " " + prompt_flag());
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("text_encoder"), std::string::npos) << r.log;
    EXPECT_EQ(r.report.at("status"), "failed");
}

TEST(Ltx2ImageHost, DitRoutesWriteTheSamePixels) {
    // dynamic: a resident budget of 0.00007 GiB (75 KB) holds the globals (48 KB) and one 21.5 KB block; the other
    // block streams through staging.
    std::map<std::string, std::vector<uint8_t>> pixels;
    for (const char * route : {"resident", "dynamic", "disk"}) {
        const auto r = run_ddo_host(std::string("ltx2_image_route_") + route,
                                    embeds_args(kFixtures / "checkpoint", std::string("--set components.transformer.route=") +
                                                                              route + (std::string(route) == "dynamic"
                                                                                  ? " --set components.transformer.resident_budget_gb=0.00007"
                                                                                  : "")),
                                    [&](const fs::path & dir) {
                                        pixels[route] = ddo::test::read_png(dir / "image.png").pixels;
                                        if (std::string(route) != "resident") return;
                                        const double e = png_error(dir / "image.png", "image_base_pag.safetensors");
                                        std::cout << "[ parity    ] base + PAG from embeddings: image.png vs the "
                                                     "composed reference: max abs error " << e << "/255 (tolerance 1/255)\n";
                                        EXPECT_LE(e, 1.0);
                                    });
        ASSERT_EQ(r.exit_code, 0) << route << "\n" << r.log;
        EXPECT_EQ(r.report.at("routes").at("transformer").at("executed"), route);
        // Bytes moved other than the one-time resident upload: what the route streamed.
        const auto & moved = r.report.at("counters").at("transformer").at("engine").at("counters").at("bytes_moved");
        const auto streamed = moved.at("file").get<uint64_t>() + moved.at("pageable").get<uint64_t>() +
                              moved.at("pinned").get<uint64_t>();
        if (std::string(route) == "resident") {
            EXPECT_EQ(streamed, 0u);
        } else {
            EXPECT_GT(streamed, 0u) << route;
        }
        std::cout << "[ routes    ] transformer on " << route << ": " << pixels[route].size() << " pixel bytes, "
                  << streamed << " bytes moved past the resident set\n";
    }
    ASSERT_FALSE(pixels["resident"].empty());
    EXPECT_TRUE(pixels["dynamic"] == pixels["resident"]) << "dynamic route: other pixels";
    EXPECT_TRUE(pixels["disk"] == pixels["resident"]) << "disk route: other pixels";
}

TEST(Ltx2ImageHost, MalformedCheckpointsFailBeforeDenoisingExit4) {
    ddo::test::expect_missing_and_misshapen_tensors_exit4(kFixtures / "checkpoint", "ltx2_image",
                                                          [](const fs::path & ckpt) { return embeds_args(ckpt); });
    {  // the audio+video DiT's weights (an LTX-2.3 video checkpoint's transformer) under the image config
        const auto ckpt = ddo::test::broken_copy(kFixtures / "checkpoint", "ltx2_image_broken_audio_video");
        fs::copy_file(fs::path(LTX2_PIPELINE_FIXTURE_DIR) / "checkpoint_23" / "transformer" /
                          "diffusion_pytorch_model.safetensors",
                      ckpt / "transformer" / "diffusion_pytorch_model.safetensors", fs::copy_options::overwrite_existing);
        ddo::test::expect_exit4_before_denoise("ltx2_image_bad_audio_video", embeds_args(ckpt), ckpt, "audio_");
        fs::remove_all(ckpt);
    }
    {  // a text encoder of another checkpoint: checkpoint_text with the connectors of checkpoint (3 text layers, not 5)
        const fs::path ckpt = fs::temp_directory_path() / ("ltx2_image_mixed_" + std::to_string(::getpid()));
        fs::remove_all(ckpt);
        fs::create_directories(ckpt);
        for (const auto & e : fs::directory_iterator(kFixtures / "checkpoint_text"))
            if (e.path().filename() != "connectors") fs::create_symlink(e.path(), ckpt / e.path().filename());
        fs::create_symlink(kFixtures / "checkpoint" / "connectors", ckpt / "connectors");
        const auto r = run_ddo_host("ltx2_image_bad_mixed", text_args(prompt_flag(), "", ckpt));
        EXPECT_EQ(r.exit_code, 4) << r.log;
        EXPECT_NE(r.log.find((ckpt / "text_encoder" / "config.json").string()), std::string::npos) << r.log;
        EXPECT_NE(r.log.find("the connectors read"), std::string::npos) << r.log;
        EXPECT_EQ(r.report.at("status"), "failed");
        EXPECT_TRUE(r.report.at("steps").empty()) << "failed before encoding";
        fs::remove_all(ckpt);
    }
}

TEST(Ltx2ImageHost, VideoCheckpointRefusedExit2) {
    // The whole LTX-2.3 video checkpoint (model_index.json: LTX2Pipeline): refused before loading, naming ltx2_video.
    const auto r = run_ddo_host("ltx2_image_video_ckpt",
                                embeds_args(fs::path(LTX2_PIPELINE_FIXTURE_DIR) / "checkpoint_23"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("LTX2Pipeline"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("ltx2_video"), std::string::npos) << r.log;
    EXPECT_EQ(r.report.at("status"), "failed");
    EXPECT_TRUE(r.report.at("steps").empty());
}
