// ddo-host from a text prompt on a checkpoint saved whole (tools/reference/qwen_image_21_text_fixtures.py): the
// PNG equals QwenImage21Pipeline(prompt=..., negative_prompt=...) with the same seed (<= 1/255), with guidance on and
// off, for resident and streamed text-encoder routes; the report shows the text encoder's route, bytes streamed and
// its unload before denoise. Also: model_index.json sample_sigmas and workload.sigmas give diffusers' image,
// `ddo-host encode` writes embeddings that reproduce the image, --latents replaces the seeded draw, a non-finite
// step fails with exit 4, and a 1024^2 default-preset run decodes resident and says why.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "ddo/model/tensor_output.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kDir = QI21_TEXT_FIXTURE_DIR;

struct TextRun : ddo::test::HostRun {
    ddo::test::Png image;
};

std::string q(const std::string & s) { return "'" + s + "'"; }

TextRun run(const std::string & tag, const std::string & args, const fs::path & model = kDir / "checkpoint") {
    TextRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "text_" + tag, "--plugin qwen_image --model " + q(model.string()) + " " + args, [&](const fs::path & dir) {
            if (fs::exists(dir / "image.png")) r.image = ddo::test::read_png(dir / "image.png");
        });
    return r;
}

const nlohmann::json & runs() {
    static nlohmann::json j = nlohmann::json::parse(std::ifstream(kDir / "reference.json")).at("pipeline_runs");
    return j;
}

// The run's flags as the fixture recorded them; `seed` / `width` replace the recorded values when >= 0.
std::string args_of(const nlohmann::json & r, int seed = -1, int width = -1) {
    std::string a = "-p " + q(r.at("prompt").get<std::string>()) + " --width " +
                    std::to_string(width >= 0 ? width : r.at("width").get<int>()) + " --height " +
                    std::to_string(r.at("height").get<int>()) + " --seed " +
                    std::to_string(seed >= 0 ? seed : r.at("seed").get<int>());
    if (!r.at("negative_prompt").is_null()) a += " -n " + q(r.at("negative_prompt").get<std::string>());
    if (!r.at("steps").is_null()) a += " --steps " + std::to_string(r.at("steps").get<int>());
    a += " --cfg-scale " + std::to_string(r.at("true_cfg_scale").get<double>());
    return a;
}

int max_diff(const TextRun & r, const std::string & name) {
    const auto want = ddo::qwen_image_21::TensorFile::open_file(kDir / "pipeline_text.safetensors").read(name + ".pixels");
    EXPECT_EQ(int64_t(r.image.height), want.size(1));
    EXPECT_EQ(int64_t(r.image.width), want.size(2));
    EXPECT_EQ(int64_t(r.image.pixels.size()), want[0].numel());
    if (int64_t(r.image.pixels.size()) != want[0].numel()) return 256;
    const auto w = want[0].contiguous();
    const uint8_t * p = w.data_ptr<uint8_t>();
    int d = 0;
    for (size_t i = 0; i < r.image.pixels.size(); ++i) d = std::max(d, std::abs(int(r.image.pixels[i]) - int(p[i])));
    return d;
}

class Qi21Text : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json"))
            GTEST_SKIP() << kDir << "/reference.json missing: build target qwen_image_21_text_fixtures";
    }
};

}  // namespace

TEST_F(Qi21Text, FromTextEqualsDiffusersOnResidentAndStreamedTextEncoderRoutes) {
    struct Case {
        const char * run;
        const char * preset;
        const char * te_route;
    };
    for (const Case & c : {Case{"cfg", "off.toml", "resident"}, Case{"cfg", "one_shot_fast.toml", "group_leaf"},
                           Case{"plain", "low_ram_safe.toml", "group_leaf"}, Case{"plain", "off.toml", "disk"}}) {
        const auto & ref = runs().at(c.run);
        std::string extra = std::string(" --preset ") + c.preset;
        if (std::string(c.te_route) == "disk") extra += " --set components.text_encoder.route=disk";
        auto r = run(std::string(c.run) + "_" + c.te_route, args_of(ref) + extra);
        ASSERT_EQ(r.exit_code, 0) << r.log;
        const int d = max_diff(r, c.run);
        EXPECT_LE(d, 1) << c.run << " on text_encoder route " << c.te_route << ": PNG vs QwenImage21Pipeline(prompt=...)";
        const auto & te = r.report.at("counters").at("text_encoder");
        EXPECT_EQ(te.at("route").get<std::string>(), c.te_route) << te.dump();
        if (std::string(c.te_route) == "resident")  // the CPU reads resident groups in place (Note [Mapped residents])
            EXPECT_GT(te.at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u) << te.dump();
        else
            EXPECT_GT(te.at("bytes_streamed").get<uint64_t>(), 0u) << te.dump();
        EXPECT_EQ(te.at("unloaded_in_phase").get<std::string>(), "encode") << te.dump();
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(r.report, &problems), (std::vector<std::string>{"vision_tower"})) << "a text-only prompt uses every component but the vision tower";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
        const auto & wl = r.report.at("workload");
        EXPECT_EQ(wl.at("text_encoder").get<std::string>(), "unloaded after encode, before denoise");
        EXPECT_EQ(wl.at("guidance_scale").get<double>(), ref.at("true_cfg_scale").get<double>());
        std::cout << "[ text      ] " << c.run << " (" << c.preset << ", text_encoder " << c.te_route
                  << "): max pixel difference " << d << "/255 vs diffusers; text encoder bytes streamed "
                  << te.at("bytes_streamed") << ", read in place " << te.at("engine").at("counters").at("mapped_bytes") << "\n";
    }
}

TEST_F(Qi21Text, SampleSigmasOfTheCheckpointAndWorkloadSigmasGiveDiffusersImage) {
    auto a = run("sample_sigmas", args_of(runs().at("sigmas")), kDir / "checkpoint_sigmas");
    ASSERT_EQ(a.exit_code, 0) << a.log;
    EXPECT_LE(max_diff(a, "sigmas"), 1) << "model_index.json sample_sigmas";
    EXPECT_NE(a.report.at("workload").at("sigmas_source").get<std::string>().find("sample_sigmas"), std::string::npos);
    EXPECT_EQ(a.report.at("workload").at("sigmas").size(), runs().at("sigmas").size() ? 3u : 0u);
    const auto & cs = runs().at("call_sigmas");
    std::string list;
    for (const auto & v : cs.at("sigmas")) list += (list.empty() ? "" : ",") + nlohmann::json(v.get<double>()).dump();
    auto b = run("call_sigmas", args_of(cs) + " --set 'workload.sigmas=[" + list + "]'");
    ASSERT_EQ(b.exit_code, 0) << b.log;
    EXPECT_LE(max_diff(b, "call_sigmas"), 1) << "workload.sigmas (the pipeline's sigmas=)";
    EXPECT_EQ(b.report.at("workload").at("sigmas_source").get<std::string>(), "workload.sigmas");
    EXPECT_EQ(b.report.at("workload").at("steps").get<int>(), int(cs.at("sigmas").size()));
    // An explicit --steps is honoured over the checkpoint's grid, and the report says the grid was not used.
    auto c = run("steps_over_sigmas", args_of(runs().at("sigmas")) + " --steps 2", kDir / "checkpoint_sigmas");
    ASSERT_EQ(c.exit_code, 0) << c.log;
    EXPECT_EQ(c.report.at("workload").at("steps").get<int>(), 2);
    EXPECT_NE(c.report.at("workload").at("sigmas_source").get<std::string>().find("not used"), std::string::npos);
}

TEST_F(Qi21Text, EncodeWritesEmbeddingsThatReproduceTheImage) {
    const auto & ref = runs().at("cfg");
    const fs::path out = fs::temp_directory_path() / ("qi21_encode_" + std::to_string(::getpid()));
    fs::remove_all(out);
    fs::create_directories(out);
    const std::string cmd = std::string("'") + DDO_HOST_BIN + "' encode --plugin qwen_image --model " +
                            q((kDir / "checkpoint").string()) + " -p " + q(ref.at("prompt").get<std::string>()) + " -n " +
                            q(ref.at("negative_prompt").get<std::string>()) + " -o " + q((out / "embeds.safetensors").string()) +
                            " --report " + q((out / "encode.json").string()) + " > " + q((out / "log").string()) + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(out / "log").rdbuf();
    auto f = ddo::qwen_image_21::TensorFile::open_file(out / "embeds.safetensors");
    EXPECT_TRUE(f.contains("prompt_embeds"));
    EXPECT_TRUE(f.contains("negative_prompt_embeds"));
    const auto rep = nlohmann::json::parse(std::ifstream(out / "encode.json"));
    EXPECT_EQ(rep.at("status").get<std::string>(), "completed");
    EXPECT_EQ(rep.at("outputs").size(), 1u);
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(rep, &problems), (std::vector<std::string>{"transformer", "vae", "vision_tower"})) << "ddo-host encode runs the text encoder only";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    std::string a = "--prompt-embeds " + q((out / "embeds.safetensors").string()) + " --width " +
                    std::to_string(ref.at("width").get<int>()) + " --height " + std::to_string(ref.at("height").get<int>()) +
                    " --steps " + std::to_string(ref.at("steps").get<int>()) + " --cfg-scale 4 --seed 0";
    auto r = run("from_encoded", a);
    ASSERT_EQ(r.exit_code, 0) << r.log;
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(r.report, &problems), (std::vector<std::string>{"text_encoder", "vision_tower"})) << "embeddings from a file: no text encoder";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    EXPECT_LE(max_diff(r, "cfg"), 1) << "generating from `ddo-host encode` embeddings";
    // Running it again does not overwrite the file unasked.
    ASSERT_NE(std::system(cmd.c_str()), 0);
    std::ifstream again(out / "log");
    EXPECT_NE(std::string(std::istreambuf_iterator<char>(again), {}).find("exists"), std::string::npos);
    fs::remove_all(out);
}

TEST_F(Qi21Text, LatentsFromAFileReplaceTheSeededDraw) {
    const auto & ref = runs().at("plain");
    const int64_t h = 2 * (ref.at("height").get<int64_t>() / 32), w = 2 * (ref.at("width").get<int64_t>() / 32);
    const auto cfg = nlohmann::json::parse(std::ifstream(kDir / "checkpoint" / "transformer" / "config.json"));
    const int64_t C = cfg.at("in_channels").get<int64_t>();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(uint64_t(ref.at("seed").get<int>()));
    const auto noise = at::randn({1, 1, C, h, w}, gen, at::TensorOptions().dtype(at::kFloat));  // the seed's own draw
    const fs::path file = fs::temp_directory_path() / ("qi21_latents_" + std::to_string(::getpid()) + ".safetensors");
    {
        std::ofstream o(file, std::ios::binary);
        o << ddo::model::encode_safetensors({{"latents", noise}}, {});
    }
    auto r = run("latents", args_of(ref, 12345) + " --latents " + q(file.string()));
    ASSERT_EQ(r.exit_code, 0) << r.log;
    EXPECT_LE(max_diff(r, "plain"), 1) << "the file's latents, not seed 12345's";
    EXPECT_TRUE(r.report.at("identity").at("checkpoint").at("inputs").contains("latents")) << r.report.at("identity").dump();
    auto bad = run("latents_bad", args_of(ref, -1, 96) + " --latents " + q(file.string()));
    EXPECT_EQ(bad.exit_code, 2) << bad.log;
    EXPECT_NE(bad.log.find("'latents' has shape"), std::string::npos) << bad.log;
    fs::remove(file);
}

// One step ends the grid at sigma 1, where the checkpoint's shift_terminal divides by zero: the schedule is refused
// before the first step (exit 2, a usage error: the settings ask for it), naming the cause and the fix (issue 25).
TEST_F(Qi21Text, ANonFiniteScheduleIsRefusedBeforeTheFirstStepNamingTheCause) {
    auto r = run("one_step", "-p 'a cat' --width 64 --height 64 --steps 1");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_EQ(r.report.at("status").get<std::string>(), "failed") << r.report.dump();
    EXPECT_NE(r.log.find("schedule is not finite"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("use 2 or more steps"), std::string::npos) << r.log;
    for (const auto & step : r.report.at("steps"))  // the text encoder's layers ran; no denoising step did
        EXPECT_NE(step.value("phase", ""), "denoise") << r.report.at("steps").dump();
    EXPECT_NE(r.log.find("shift_terminal"), std::string::npos) << r.log;
    EXPECT_TRUE(r.report.at("outputs").empty());
}

TEST_F(Qi21Text, A1024DefaultPresetRunDecodesResidentAndSaysWhy) {
    auto r = run("1024", "-p 'a cat' --width 1024 --height 1024 --steps 2");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & vae = r.report.at("counters").at("vae");
    EXPECT_EQ(vae.at("strategy").get<std::string>(), "resident") << vae.dump();
    EXPECT_EQ(vae.at("requested").get<std::string>(), "auto") << vae.dump();
    EXPECT_NE(vae.at("reason").get<std::string>().find("fits"), std::string::npos) << vae.dump();
    EXPECT_GT(vae.at("auto").at("estimate_activation_bytes").get<uint64_t>(), 0u);
    EXPECT_EQ(r.image.width, 1024u);
    std::cout << "[ vae auto  ] 1024x1024: " << vae.at("reason").get<std::string>() << "\n";
}

TEST_F(Qi21Text, ADryRunFromTextPlansTheTextEncoderAndTheTransformer) {
    auto r = run("dry", "-p 'a cat' -n 'blurry' --cfg-scale 4 --dry-run --width 64 --height 64 --steps 2");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & c = r.report.at("counters");
    ASSERT_TRUE(c.contains("text_encoder")) << c.dump();
    ASSERT_TRUE(c.contains("transformer")) << c.dump();
    EXPECT_EQ(c.at("text_encoder").at("unloaded").get<bool>(), true);
    EXPECT_TRUE(r.report.at("outputs").empty());
    auto bad = run("dry_vision", "-p 'a <|image_pad|> cat' --dry-run --width 64 --height 64 --steps 2");
    EXPECT_EQ(bad.exit_code, 2) << bad.log;
    EXPECT_NE(bad.log.find("remove the token from the prompt"), std::string::npos) << bad.log;  // a dry run tokenizes
}

// Note [Component files]: --text-encoder FILE replaces text_encoder/'s weights (the folder keeps config.json): the
// checkpoint's own weights given as a file to a copy whose text_encoder/ holds no weights make the same PNG, streamed
// on group_leaf; the report names the file. Without the file that copy fails naming the folder (exit 4).
TEST_F(Qi21Text, ATextEncoderFileReplacesTheFoldersWeights) {
    const auto & ref = runs().at("plain");
    const fs::path copy = fs::temp_directory_path() / ("ddo_text_file_" + std::to_string(::getpid()));
    fs::remove_all(copy);
    fs::copy(kDir / "checkpoint", copy, fs::copy_options::recursive);
    const fs::path weights = copy.parent_path() / ("ddo_text_file_" + std::to_string(::getpid()) + ".safetensors");
    fs::rename(copy / "text_encoder" / "model.safetensors", weights);
    const auto folder = run("te_folder", args_of(ref) + " --preset low_ram_safe.toml");
    ASSERT_EQ(folder.exit_code, 0) << folder.log;
    const auto file = run("te_file", args_of(ref) + " --preset low_ram_safe.toml --text-encoder " + q(weights.string()), copy);
    ASSERT_EQ(file.exit_code, 0) << file.log;
    EXPECT_EQ(file.image.pixels, folder.image.pixels);
    const auto & id = file.report.at("identity").at("checkpoint").at("identity").at("components").at("text_encoder");
    EXPECT_EQ(id.at("replaced_by").at("file"), fs::absolute(weights).string()) << id.dump();
    EXPECT_EQ(file.report.at("counters").at("text_encoder").at("route"), "group_leaf");
    const auto missing = run("te_missing", args_of(ref) + " --preset low_ram_safe.toml", copy);
    EXPECT_EQ(missing.exit_code, 4) << missing.log;
    fs::remove_all(copy);
    fs::remove(weights);
}

// Issue 26: a quantized text encoder through ddo-host. The scaled-fp8 tower of the text-encoder quant fixtures (the
// same tiny Qwen3-VL as this checkpoint's, tools/reference/text_quant_fixtures.py; its parity against transformers is
// tests/parity/qwen_image_21_text_quant_parity_test.cpp) given as --text-encoder FILE: the run completes from a prompt,
// streamed on low_ram_safe, and the report, the console plan and `report summarize` say what is quantized.
TEST_F(Qi21Text, AQuantizedTextEncoderFileRunsFromAPromptAndIsReported) {
    const fs::path fp8 = fs::path(TEXT_QUANT_FIXTURE_DIR) / "qwen_fp8_scaled" / "checkpoint" / "text_encoder" / "model.safetensors";
    if (!fs::exists(fp8)) GTEST_SKIP() << fp8 << " missing: build target text_quant_fixtures";
    const auto & ref = runs().at("plain");
    const auto dense = run("te_dense", args_of(ref) + " --preset low_ram_safe.toml");
    const auto r = run("te_fp8", args_of(ref) + " --preset low_ram_safe.toml --text-encoder " + q(fp8.string()));
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & qn = r.report.at("counters").at("text_encoder").at("quantization");
    EXPECT_EQ(qn.at("method"), "fp8") << qn.dump();
    EXPECT_GT(qn.at("formats").value("FP8 E4M3 scaled", 0), 0) << qn.dump();
    EXPECT_GT(qn.at("dequant_count").get<uint64_t>(), 0u) << qn.dump();
    EXPECT_NE(r.log.find("quantized fp8: "), std::string::npos) << r.log;
    ASSERT_EQ(dense.exit_code, 0) << dense.log;
    EXPECT_NE(r.image.pixels, dense.image.pixels) << "the fp8 tower's rounding changes the embeddings, so the image";
}
