// LoRA through ddo-host (issue 27; Note [Applying LoRA] in docs/architecture.md) against diffusers' load_lora_weights
// + set_adapters on the same pipelines (tools/reference/qwen_image_21_lora_fixtures.py, ltx2_lora_fixtures.py): two
// LoRAs (rank 4 with alpha 8 at strength 0.7, rank 2 without alpha at 1.3), each written in every key family from
// the same factors, so every family must give the reference's output: qwen_image_21's and ltx2_image's PNG pixels
// (tolerance 1/255, as the RGB output test), ltx2_video's WAV within 16-bit rounding and its MP4 frames within the
// H.264 round trip. Every engine route gives the same image bitwise; the SDNQ uint4 and GGUF Q4_K transformers take
// the LoRA at run time and equal diffusers on the dequantized weights + the LoRA. Refusals: a LoRA for another model
// (exit 2, nothing computed; a warning with --lora-allow-unmatched), a truncated file and a LoRA of another size
// (exit 4, naming them); the report is written in each.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/media/media_decode.hpp"
#include "ddo/model/tensor_file.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;

namespace {

const fs::path kQwen = QI21_LORA_FIXTURE_DIR;
const fs::path kLtx = LTX2_LORA_FIXTURE_DIR;
const fs::path kQwenText = QI21_TEXT_LORA_FIXTURE_DIR;

struct LoraRun : ddo::test::HostRun {
    ddo::test::Png image;
    std::vector<float> audio;  // planar [2, frames]
    ddo::media::DecodedVideo video;
};

LoraRun run(const std::string & tag, const std::string & args) {
    LoraRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host("lora_" + tag, args, [&](const fs::path & dir) {
        if (fs::exists(dir / "image.png")) r.image = ddo::test::read_png(dir / "image.png");
        if (fs::exists(dir / "audio.wav")) r.audio = ddo::media::decode_audio(dir / "audio.wav").samples;
        if (fs::exists(dir / "video.mp4")) r.video = ddo::media::decode_video_rgb(dir / "video.mp4");
    });
    return r;
}

// --lora flags for a fixture run: `loras` is [[name, strength], ...].
std::string lora_flags(const fs::path & dir, const nlohmann::json & loras, const std::string & format) {
    std::string s;
    for (const auto & l : loras)
        s += " --lora " + quoted(dir / (l.at(0).get<std::string>() + "." + format + ".safetensors")) + ":" +
             std::to_string(l.at(1).get<double>());
    return s;
}

// The largest |PNG - reference| over all pixels, the reference a uint8 HWC tensor.
int max_pixel_diff(const ddo::test::Png & png, const at::Tensor & want) {
    EXPECT_EQ(int64_t(png.pixels.size()), want.numel());
    if (int64_t(png.pixels.size()) != want.numel()) return 255;
    const auto w = want.contiguous();
    const uint8_t * p = w.data_ptr<uint8_t>();
    int d = 0;
    for (size_t i = 0; i < png.pixels.size(); ++i) d = std::max(d, std::abs(int(png.pixels[i]) - int(p[i])));
    return d;
}

std::string qwen_args(const fs::path & model, const std::string & extra = "") {
    return "--plugin qwen_image --preset low_ram_safe.toml --model " + quoted(model) + " --prompt-embeds " +
           quoted(kQwen / "prompt_embeds.safetensors") +
           " --steps 2 --width 64 --height 64 --seed 0 --set plugin.qwen_image_21.use_kv_cache=true" + extra;
}

nlohmann::json reference(const fs::path & dir) { return nlohmann::json::parse(std::ifstream(dir / "reference.json")); }

class Qi21Lora : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(fs::exists(kQwen / "reference.json")) << kQwen << ": build target qwen_image_21_lora_fixtures";
    }
    const nlohmann::json ref = fs::exists(kQwen / "reference.json") ? reference(kQwen) : nlohmann::json();
    const ddo::model::TensorFile want = ddo::model::TensorFile::open_file(kQwen / "pipeline.safetensors");
};

TEST_F(Qi21Lora, EveryKeyFamilyEqualsDiffusersLoadLoraWeights) {
    const auto none = run("qi_none", qwen_args(kQwen / "checkpoint"));
    ASSERT_EQ(none.exit_code, 0) << none.log;
    EXPECT_LE(max_pixel_diff(none.image, want.read("none.pixels")), 1);
    for (const auto & format : ref.at("formats")) {
        for (const std::string r : {"one", "two"}) {
            const auto loras = ref.at("runs").at(r).at("loras");
            const auto got = run("qi_" + r, qwen_args(kQwen / "checkpoint", lora_flags(kQwen, loras, format)));
            ASSERT_EQ(got.exit_code, 0) << got.log;
            const int d = max_pixel_diff(got.image, want.read(r + ".pixels"));
            EXPECT_LE(d, 1) << format << " " << r << " vs diffusers' load_lora_weights + set_adapters";
            // The test can fail: the LoRA moves the image far more than the tolerance.
            EXPECT_GT(max_pixel_diff(got.image, want.read("none.pixels")), 10) << format << " " << r << ": no effect";
            const auto & c = got.report.at("counters").at("transformer").at("lora");
            EXPECT_EQ(c.at("applied"), c.at("modules")) << c.dump();
            EXPECT_TRUE(c.at("not_applied").empty()) << c.dump();
            const auto & files = got.report.at("identity").at("checkpoint").at("loras");
            ASSERT_EQ(files.size(), loras.size());
            for (std::size_t i = 0; i < files.size(); ++i) {
                EXPECT_EQ(files[i].at("unmatched"), 0) << files[i].dump();
                EXPECT_EQ(files[i].at("matched").at("transformer"),
                          ref.at("loras").at(loras[i].at(0).get<std::string>()).at("modules"));
                EXPECT_EQ(files[i].at("strength"), loras[i].at(1));
                EXPECT_EQ(files[i].at("identity").at("sha256").get<std::string>().size(), 64u);
            }
            std::cout << "[ lora      ] qwen_image_21 " << format.get<std::string>() << " " << r << " ("
                      << files[0].at("format").get<std::string>() << "): max pixel difference " << d
                      << "/255 vs diffusers; " << c.at("applied") << " modules adapted\n";
        }
    }
}

// A text-encoder LoRA (text_encoder. keys: the Qwen3-VL language model's 21 Linears) from a prompt, alone and with a
// transformer LoRA, in the PEFT family (alpha in diffusers' prefixed metadata) and kohya's lora_te_ (qwen_image_21_text_
// lora_fixtures.py: diffusers' own LoRA loading path into the text encoder, then QwenImage21Pipeline), on the resident
// and the streamed (low_ram_safe: group_leaf) text-encoder routes.
TEST(Qi21TextLora, ATextEncoderLoraFromAPromptEqualsDiffusers) {
    ASSERT_TRUE(fs::exists(kQwenText / "reference.json")) << kQwenText << ": build target qwen_image_21_text_lora_fixtures";
    const auto ref = reference(kQwenText);
    const auto want = ddo::model::TensorFile::open_file(kQwenText / "pipeline.safetensors");
    const auto args_of = [&](const nlohmann::json & flags, const std::string & preset, const std::string & swap = "") {
        std::string a = "--preset " + preset;
        for (const auto & f : flags) {
            std::string t = f.get<std::string>();
            if (!swap.empty() && t.starts_with("te_lora.peft")) t = swap;
            const auto colon = t.find(':');
            if (fs::exists(kQwenText / t.substr(0, colon))) t = (kQwenText / t).string();  // fixture-relative paths
            a += " " + ddo::test::quoted(fs::path(t));
        }
        return a;
    };
    for (const std::string preset : {"off.toml", "low_ram_safe.toml"}) {
        for (const std::string r : {"te", "both"}) {
            const auto got = run("qt_" + r, args_of(ref.at("ddo_host").at("flags").at(r), preset));
            ASSERT_EQ(got.exit_code, 0) << got.log;
            const int d = max_pixel_diff(got.image, want.read(r + ".pixels"));
            EXPECT_LE(d, 1) << preset << " " << r;
            EXPECT_GT(max_pixel_diff(got.image, want.read("none.pixels")), 10) << r << ": no effect";
            const auto & c = got.report.at("counters").at("text_encoder").at("lora");
            EXPECT_EQ(c.at("applied"), 21) << c.dump();
            EXPECT_EQ(got.report.at("identity").at("checkpoint").at("loras").at(0).at("matched").at("text_encoder"), 21);
            std::cout << "[ lora      ] qwen_image_21 text encoder (" << preset << ") " << r << ": max pixel difference "
                      << d << "/255, " << c.at("applied") << " modules adapted\n";
        }
    }
    const auto kohya = run("qt_kohya", args_of(ref.at("ddo_host").at("flags").at("te"), "off.toml",
                                               ref.at("ddo_host").at("kohya_te_lora").get<std::string>()));
    ASSERT_EQ(kohya.exit_code, 0) << kohya.log;
    EXPECT_LE(max_pixel_diff(kohya.image, want.read("te.pixels")), 1) << "kohya lora_te_";
    // From embeddings the text encoder is not read: its LoRA adapts nothing, refused (exit 2).
    const auto refused = run("qt_embeds", "--plugin qwen_image --model " + quoted(kQwen / "checkpoint") + " --prompt-embeds " +
                                              quoted(kQwen / "prompt_embeds.safetensors") + " --steps 1 --width 64 --height 64 --lora " +
                                              quoted(kQwenText / "te_lora.peft.safetensors"));
    EXPECT_EQ(refused.exit_code, 2) << refused.log;
    EXPECT_NE(refused.log.find("this run does not read the text_encoder"), std::string::npos) << refused.log;
}

TEST_F(Qi21Lora, EveryRouteGivesTheResidentImageBitwise) {
    const auto flags = lora_flags(kQwen, ref.at("runs").at("two").at("loras"), "peft");
    const auto resident = run("qi_resident", qwen_args(kQwen / "checkpoint", flags + " --set components.transformer.route=resident"));
    ASSERT_EQ(resident.exit_code, 0) << resident.log;
    for (const std::string route : {"component", "dynamic", "disk", "group_block", "group_leaf"}) {
        const auto got = run("qi_" + route, qwen_args(kQwen / "checkpoint", flags + " --set components.transformer.route=" + route));
        ASSERT_EQ(got.exit_code, 0) << route << "\n" << got.log;
        EXPECT_EQ(got.report.at("routes").at("transformer").at("executed"), route);
        EXPECT_EQ(got.image.pixels, resident.image.pixels) << route << " differs from resident";
        EXPECT_EQ(got.report.at("counters").at("transformer").at("lora").at("applied"),
                  resident.report.at("counters").at("transformer").at("lora").at("applied"));
    }
}

// lora.apply = merge on the resident route: every block module merged once (the globals the plugin holds stay at run
// time), the image equal to the run-time one within rounding and to itself bitwise; a streamed route keeps run time.
TEST_F(Qi21Lora, MergedIntoResidentWeightsEqualsRuntime) {
    const auto flags = lora_flags(kQwen, ref.at("runs").at("two").at("loras"), "peft");
    const auto runtime = run("qi_runtime", qwen_args(kQwen / "checkpoint", flags + " --set components.transformer.route=resident"));
    ASSERT_EQ(runtime.exit_code, 0) << runtime.log;
    const std::string merge = flags + " --set components.transformer.route=resident --set lora.apply=merge";
    const auto a = run("qi_merge_a", qwen_args(kQwen / "checkpoint", merge));
    const auto b = run("qi_merge_b", qwen_args(kQwen / "checkpoint", merge));
    ASSERT_EQ(a.exit_code, 0) << a.log;
    ASSERT_EQ(b.exit_code, 0) << b.log;
    EXPECT_LE(max_pixel_diff(a.image, want.read("two.pixels")), 1);
    EXPECT_EQ(a.image.pixels, b.image.pixels) << "merging is reproducible bitwise";
    const auto & c = a.report.at("counters").at("transformer").at("lora");
    EXPECT_EQ(c.at("how"), "merged and runtime") << c.dump();
    EXPECT_EQ(c.at("merged"), 14) << "every block module (2 blocks x 7)";
    EXPECT_EQ(c.at("applied"), 2) << "img_in and proj_out: globals held by the plugin";
    EXPECT_GT(c.at("merged_bytes").get<std::uint64_t>(), 0u);
    EXPECT_TRUE(c.at("not_applied").empty()) << c.dump();
    const auto streamed = run("qi_merge_disk", qwen_args(kQwen / "checkpoint", flags + " --set components.transformer.route=disk --set lora.apply=merge"));
    ASSERT_EQ(streamed.exit_code, 0) << streamed.log;
    EXPECT_EQ(streamed.report.at("counters").at("transformer").at("lora").at("merged"), 0) << "a streamed group is never merged";
    EXPECT_EQ(streamed.image.pixels, runtime.image.pixels);
    std::cout << "[ lora      ] merge (resident): " << c.at("merged") << " modules merged in " << c.at("merge_s")
              << " s, max pixel difference to run time " << max_pixel_diff(a.image, want.read("two.pixels")) << "/255\n";
}

TEST_F(Qi21Lora, QuantizedTransformersTakeTheLoraAtRunTime) {
    for (const auto & [c, q] : ref.at("quant_cases").items()) {
        for (const std::string r : {"none", "two"}) {
            const auto got = run("qi_" + c + "_" + r,
                                 qwen_args(kQwen / q.at("checkpoint").get<std::string>(),
                                           lora_flags(kQwen, q.at("loras").at(r), "peft")));
            ASSERT_EQ(got.exit_code, 0) << got.log;
            const int d = max_pixel_diff(got.image, want.read(c + "." + r + ".pixels"));
            EXPECT_LE(d, 1) << c << " " << r << " vs diffusers on the dequantized weights + the LoRAs";
            EXPECT_TRUE(got.report.at("counters").at("transformer").at("quantization").at("method").is_string()) << c;
            std::cout << "[ lora      ] " << c << " " << r << ": max pixel difference " << d << "/255\n";
        }
    }
}

TEST_F(Qi21Lora, ALoraForAnotherModelIsRefusedBeforeAnythingIsComputed) {
    const auto other = kLtx / "image" / "lora_a.peft.safetensors";
    const auto refused = run("qi_other", qwen_args(kQwen / "checkpoint", " --lora " + quoted(other)));
    EXPECT_EQ(refused.exit_code, 2) << refused.log;
    EXPECT_NE(refused.log.find("modules adapt nothing"), std::string::npos) << refused.log;
    EXPECT_NE(refused.log.find("; 0 matched"), std::string::npos) << refused.log;
    EXPECT_NE(refused.log.find("lora.allow_unmatched"), std::string::npos) << refused.log;
    ASSERT_TRUE(refused.report.is_object()) << "the report is written";
    EXPECT_EQ(refused.report.at("identity").at("checkpoint").at("loras").at(0).at("unmatched"), 21);
    EXPECT_FALSE(refused.report.at("counters").contains("transformer")) << "nothing was loaded or computed";
    // Allowed: a warning in the report, and the image is the LoRA-free one.
    const auto allowed = run("qi_other_allowed", qwen_args(kQwen / "checkpoint", " --lora " + quoted(other) + " --lora-allow-unmatched"));
    ASSERT_EQ(allowed.exit_code, 0) << allowed.log;
    EXPECT_EQ(allowed.report.at("identity").at("checkpoint").at("lora_warnings").size(), 1u);
    EXPECT_LE(max_pixel_diff(allowed.image, want.read("none.pixels")), 1);
}

TEST_F(Qi21Lora, ADamagedOrMisfitLoraIsRefusedNamingIt) {
    const fs::path dir = fs::temp_directory_path() / ("ddo_lora_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto cut = dir / "cut.safetensors";
    fs::copy_file(kQwen / "lora_a.peft.safetensors", cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, fs::file_size(cut) - 1000);
    const auto truncated = run("qi_cut", qwen_args(kQwen / "checkpoint", " --lora " + quoted(cut)));
    EXPECT_EQ(truncated.exit_code, 4) << truncated.log;
    EXPECT_NE(truncated.log.find(cut.string()), std::string::npos) << truncated.log;
    EXPECT_TRUE(truncated.report.is_object()) << "the report is written";
    // The wide checkpoint's LoRA on the tiny checkpoint: the module exists, its shape does not fit.
    const auto misfit = run("qi_wide", qwen_args(kQwen / "checkpoint", " --lora " + quoted(kQwen / "lora_a_wide.peft.safetensors")));
    EXPECT_EQ(misfit.exit_code, 4) << misfit.log;
    EXPECT_NE(misfit.log.find("lora_a_wide.peft.safetensors"), std::string::npos) << misfit.log;
    EXPECT_NE(misfit.log.find("another model or another size"), std::string::npos) << misfit.log;
    EXPECT_TRUE(misfit.report.is_object());
    fs::remove_all(dir);
}

TEST_F(Qi21Lora, APresetsAdaptersAreRelativeToThePresetAndEqualTheFlags) {
    const fs::path dir = fs::temp_directory_path() / ("ddo_lora_preset_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(kQwen / "lora_a.comfyui.safetensors", dir / "a.safetensors", fs::copy_options::overwrite_existing);
    fs::copy_file(kQwen / "lora_b.kohya.safetensors", dir / "b.safetensors", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "styled.toml") << "schema_version = 1\ninherits = \"low_ram_safe\"\n"
                                          "[lora]\nadapters = [\"a.safetensors:0.7\", \"b.safetensors:1.3\"]\n";
    auto args = qwen_args(kQwen / "checkpoint");
    args.replace(args.find("low_ram_safe.toml"), 17, quoted(dir / "styled.toml"));
    const auto got = run("qi_preset", args);
    ASSERT_EQ(got.exit_code, 0) << got.log;
    EXPECT_LE(max_pixel_diff(got.image, want.read("two.pixels")), 1);
    EXPECT_EQ(got.report.at("settings").at("values").at("lora.adapters").at("source").at("layer"), "preset");
    fs::remove_all(dir);
}

// The fixture's ddo-host arguments (models.<m>.settings.ddo_host_args), its relative paths made absolute.
std::string ltx_args(const nlohmann::json & model, const std::string & extra) {
    std::string a = " " + model.at("settings").at("ddo_host_args").get<std::string>();
    for (const std::string rel : {" video/", " image/"})
        for (auto at = a.find(rel); at != std::string::npos; at = a.find(rel, at + 1))
            a.replace(at + 1, 0, kLtx.string() + "/");
    return a + extra;
}

class Ltx2Lora : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_TRUE(fs::exists(kLtx / "reference.json")) << kLtx << ": build target ltx2_lora_fixtures"; }
    const nlohmann::json ref = fs::exists(kLtx / "reference.json") ? reference(kLtx) : nlohmann::json();
};

TEST_F(Ltx2Lora, TheImageModelEqualsTheReferenceInEveryKeyFamily) {
    const auto & m = ref.at("models").at("image");
    const auto want = ddo::model::TensorFile::open_file(kLtx / "image" / "image.safetensors");
    for (const std::string format : {"peft", "comfyui", "ltx"}) {
        for (const std::string r : {"one", "two"}) {
            const auto loras = ref.at("strengths").at(r);
            const auto got = run("li_" + format + r, ltx_args(m, lora_flags(kLtx / "image", loras, format)));
            ASSERT_EQ(got.exit_code, 0) << got.log;
            const int d = max_pixel_diff(got.image, want.read(r + ".pixels"));
            EXPECT_LE(d, 1) << format << " " << r;
            EXPECT_GT(max_pixel_diff(got.image, want.read("none.pixels")), 10) << format << " " << r << ": no effect";
            const auto & c = got.report.at("counters").at("transformer").at("lora");
            EXPECT_EQ(c.at("applied"), c.at("modules")) << c.dump();
            std::cout << "[ lora      ] ltx2_image " << format << " " << r << ": max pixel difference " << d << "/255, "
                      << c.at("applied") << " modules adapted\n";
        }
    }
}

TEST_F(Ltx2Lora, TheImageModelsRoutesGiveTheResidentImageBitwise) {
    const auto & m = ref.at("models").at("image");
    const auto flags = lora_flags(kLtx / "image", ref.at("strengths").at("two"), "ltx");
    const auto resident = run("li_resident", ltx_args(m, flags + " --set components.transformer.route=resident"));
    ASSERT_EQ(resident.exit_code, 0) << resident.log;
    for (const std::string route : {"disk", "group_leaf"}) {
        const auto got = run("li_" + route, ltx_args(m, flags + " --set components.transformer.route=" + route));
        ASSERT_EQ(got.exit_code, 0) << route << "\n" << got.log;
        EXPECT_EQ(got.report.at("routes").at("transformer").at("executed"), route);
        EXPECT_EQ(got.image.pixels, resident.image.pixels) << route;
    }
}

// The waveform is the strict check: the joint audio-video DiT's audio stream reads the video stream through its
// cross-attention, so every adapted module reaches it, and the WAV keeps it to 16-bit rounding. The MP4 (32x32, 5
// frames, yuv420p H.264) loses more than the LoRA moves on average, so its frames are held to the codec's own error
// on the LoRA-free run and must sit nearer diffusers' LoRA frames than its LoRA-free ones.
TEST_F(Ltx2Lora, TheVideoModelsWaveformAndFramesEqualDiffusers) {
    const auto & m = ref.at("models").at("video");
    const auto want = ddo::model::TensorFile::open_file(kLtx / "video" / "pipeline.safetensors");
    const auto audio = want.read("two.audio").clamp(-1, 1);  // [2, N]
    const auto frames = want.read("two.frames");               // [F, 3, H, W] in [0, 1]
    const auto none_frames = want.read("none.frames");
    const auto rgb_of = [](const LoraRun & r) {
        return at::from_blob(const_cast<uint8_t *>(r.video.rgb.data()), {r.video.frames, r.video.height, r.video.width, 3},
                             at::kByte).permute({0, 3, 1, 2}).to(at::kFloat) / 255.0;
    };
    const auto none = run("lv_none", ltx_args(m, ""));
    ASSERT_EQ(none.exit_code, 0) << none.log;
    ASSERT_EQ(none.video.frames, frames.size(0));
    const double codec = (rgb_of(none) - none_frames).abs().mean().item<double>();
    for (const std::string format : {"peft", "ltx"}) {
        const auto got = run("lv_" + format, ltx_args(m, lora_flags(kLtx / "video", ref.at("strengths").at("two"), format)));
        ASSERT_EQ(got.exit_code, 0) << got.log;
        ASSERT_EQ(int64_t(got.audio.size()), audio.numel());
        const auto wav = at::from_blob(const_cast<float *>(got.audio.data()), audio.sizes(), at::kFloat);
        const double err = (wav - audio).abs().max().item<double>();
        EXPECT_LE(err, 1.0 / 32768 + 1e-6) << format << ": audio.wav vs diffusers' waveform";
        ASSERT_EQ(got.video.frames, frames.size(0));
        const double to_lora = (rgb_of(got) - frames).abs().mean().item<double>();
        const double to_none = (rgb_of(got) - none_frames).abs().mean().item<double>();
        EXPECT_LE(to_lora, 1.25 * codec) << format << ": the MP4 vs diffusers' LoRA frames, the codec's error " << codec;
        EXPECT_LT(to_lora, to_none) << format << ": nearer diffusers' LoRA frames than its LoRA-free ones";
        const auto & c = got.report.at("counters").at("transformer").at("lora");
        EXPECT_EQ(c.at("applied"), c.at("modules")) << c.dump();
        std::cout << "[ lora      ] ltx2_video " << format << " two: wav max error " << err << "; mp4 mean |frame error| "
                  << to_lora << " (the codec's on the LoRA-free run " << codec << "; vs the LoRA-free frames " << to_none
                  << "); " << c.at("applied") << " modules adapted\n";
    }
}

}  // namespace
