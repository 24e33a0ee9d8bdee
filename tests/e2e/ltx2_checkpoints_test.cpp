// ddo-host --plugin ltx2 on LTX-2 checkpoints of other configurations than the pipeline fixtures', which diffusers'
// own LTX2Pipeline runs (tools/reference/ltx2_checkpoint_fixtures.py; issue 40 items 7 and 8): a video VAE whose
// encoder ddo cannot run, used by a text-to-video run that never encodes (and refused, naming why, by a run that
// does); a Gemma-3 text encoder with attention biases on every engine route; a frame count off the VAE's temporal
// grid (the video floored, the audio of the requested duration); a timestep-conditioned VAE decoding with
// decode_timestep / decode_noise_scale. Each equals diffusers: the WAV within 16-bit rounding (2/32768), the PNG
// frames (the MP4's input pixels) within one step of 8-bit rounding, and the MP4 holding as many frames.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/media/media_decode.hpp"
#include "ddo/model/image_output.hpp"
#include "ddo/model/tensor_file.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kFixtures = LTX2_CHECKPOINT_FIXTURE_DIR;
constexpr double kWavTolerance = 2.0 / 32768;  // 16-bit PCM rounding and the clip to [-1, 1]
constexpr int kPixelTolerance = 1;             // (x * 255).round() of float frames that differ in the last bits

const nlohmann::json & reference() {
    static const nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json"));
    return j;
}

const nlohmann::json & case_of(const std::string & name) { return reference().at("cases").at(name); }

// The case's settings (ltx2_pipeline_fixtures.py's PLAIN: no guidance of any kind, 2 steps) as ddo-host flags, from
// `source` (--prompt-embeds FILE or -p TEXT), the frames written as PNG files too.
std::string case_args(const std::string & name, const std::string & source, const std::string & extra = "") {
    const auto & c = case_of(name);
    const auto & s = c.at("settings");
    const auto n = [](const nlohmann::json & v) { return v.dump(); };
    std::string a = "--plugin ltx2 --model " + quoted(kFixtures / c.at("checkpoint").get<std::string>()) + " " + source +
                    " --seed " + std::to_string(reference().at("seed").get<int>()) + " --width " + n(s.at("width")) +
                    " --height " + n(s.at("height")) + " --frames " + n(s.at("num_frames")) + " --fps " +
                    n(s.at("frame_rate")) + " --steps " + n(s.at("num_inference_steps")) + " --cfg-scale " +
                    n(s.at("guidance_scale"));
    for (const char * k : {"stg_scale", "modality_scale", "guidance_rescale", "audio_guidance_scale", "audio_stg_scale",
                           "audio_modality_scale", "audio_guidance_rescale", "use_cross_timestep", "max_sequence_length"})
        a += " --set plugin.ltx2_video." + std::string(k) + "=" + n(s.at(k));
    for (const auto & [k, v] : c.at("pipeline_args").items()) a += " --set plugin.ltx2_video." + k + "=" + n(v);
    return a + " --set plugin.ltx2_video.frames_png=true " + extra;
}

std::string embeds_flag() { return "--prompt-embeds " + quoted(kFixtures / "prompt_embeds.safetensors"); }

struct Parity {
    double wav = 1e30;
    int pixels = 255;
    int64_t wav_samples = -1, png_frames = -1, mp4_frames = -1;
};

// The outputs in `dir` against the case's reference: the WAV against `audio`, the PNG frames against `frames`.
Parity parity_of(const fs::path & dir, const std::string & name) {
    const auto f = ddo::model::TensorFile::open_file(kFixtures / (name + ".safetensors"));
    const auto audio = f.read("audio").clamp(-1, 1).contiguous();              // [2, N]
    const auto frames = f.read("frames");                                       // [F, 3, H, W] in [0, 1]
    const auto want_px = (frames * 255).round().to(at::kByte).permute({0, 2, 3, 1}).contiguous();  // [F, H, W, 3]
    Parity p;
    const auto wav = ddo::media::decode_audio(dir / "audio.wav");
    p.wav_samples = wav.frames;
    if (wav.channels == 2 && wav.frames == audio.size(1)) {
        const auto got = at::from_blob(const_cast<float *>(wav.samples.data()), {2, wav.frames}, at::kFloat);
        p.wav = (got - audio).abs().max().item<double>();
    }
    p.mp4_frames = ddo::media::decode_video_rgb(dir / "video.mp4").frames;
    p.png_frames = 0;
    int worst = 0;
    for (int64_t i = 0;; ++i) {
        char file[32];
        std::snprintf(file, sizeof file, "video_%05d.png", int(i));
        if (!fs::exists(dir / file)) break;
        ++p.png_frames;
        if (i >= want_px.size(0)) continue;
        const auto png = ddo::test::read_png(dir / file);
        const auto want = want_px[i];
        if (int64_t(png.pixels.size()) != want.numel()) return p;
        const uint8_t * w = want.data_ptr<uint8_t>();
        for (std::size_t k = 0; k < png.pixels.size(); ++k) worst = std::max(worst, std::abs(int(png.pixels[k]) - int(w[k])));
    }
    if (p.png_frames == frames.size(0)) p.pixels = worst;
    return p;
}

// `r` completed and its outputs equal the case's reference; `label` names the run in messages.
void expect_equals_diffusers(const ddo::test::HostRun & r, const Parity & p, const std::string & name,
                             const std::string & label) {
    ASSERT_EQ(r.exit_code, 0) << label << "\n" << r.log;
    const auto & shapes = case_of(name).at("shapes");
    EXPECT_EQ(p.wav_samples, shapes.at("audio")[1].get<int64_t>()) << label << ": the WAV's samples per channel";
    EXPECT_LE(p.wav, kWavTolerance) << label << ": audio.wav vs diffusers' waveform";
    EXPECT_EQ(p.png_frames, shapes.at("frames")[0].get<int64_t>()) << label << ": PNG frames";
    EXPECT_EQ(p.mp4_frames, shapes.at("frames")[0].get<int64_t>()) << label << ": MP4 frames";
    EXPECT_LE(p.pixels, kPixelTolerance) << label << ": PNG frames vs diffusers' frames";
    std::cout << "[ parity    ] " << label << ": wav max abs error " << p.wav << " (tolerance " << kWavTolerance << ", "
              << p.wav_samples << " samples), " << p.png_frames << " frames within " << p.pixels
              << "/255 (tolerance " << kPixelTolerance << "), MP4 " << p.mp4_frames << " frames\n";
}

ddo::test::HostRun run_case(const std::string & tag, const std::string & name, const std::string & args) {
    Parity p;
    auto r = run_ddo_host(tag, args, [&](const fs::path & dir) {
        if (fs::exists(dir / "audio.wav") && fs::exists(dir / "video.mp4")) p = parity_of(dir, name);
    });
    expect_equals_diffusers(r, p, name, tag);
    return r;
}

const nlohmann::json * adjustment(const nlohmann::json & report, const std::string & key) {
    for (const auto & a : report.at("adjustments"))
        if (a.at("key") == key) return &a;
    return nullptr;
}

}  // namespace

// Item 8 (a): the text-to-video run never uses the VAE's encoder, whose configuration ddo cannot run; a run that
// encodes an image is refused before loading (exit 2), naming the config file, the key and why.
TEST(Ltx2Checkpoints, AVaeEncoderTheRunDoesNotUseIsNotValidated) {
    run_case("ltx2_ck_encoder_unused", "encoder_unused", case_args("encoder_unused", embeds_flag()));

    const fs::path png = fs::temp_directory_path() / ("ltx2_ck_still_" + std::to_string(::getpid()) + ".png");
    std::vector<uint8_t> px(32 * 32 * 3);
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7);
    ddo::model::write_png(png, px.data(), 32, 32, 3);
    const auto r = run_ddo_host("ltx2_ck_encoder_used", case_args("encoder_unused", embeds_flag(), "--image " + quoted(png)));
    fs::remove(png);
    EXPECT_EQ(r.exit_code, 2) << r.log;
    const auto vae_config = (kFixtures / "checkpoint_encoder_unused" / "vae" / "config.json").string();
    for (const std::string & s : {vae_config, std::string("'block_out_channels'"), std::string("group means"),
                                  std::string("--image")})
        EXPECT_NE(r.log.find(s), std::string::npos) << "names " << s << "\n" << r.log;
    ASSERT_TRUE(r.report.is_object());
    EXPECT_EQ(r.report.at("status"), "failed");
    for (const auto & st : r.report.at("steps")) EXPECT_NE(st.value("phase", ""), "denoise") << "refused before denoising";
}

// Item 8 (c): 12 frames on a VAE of temporal ratio 2: the video latent grid floors them to 11 (recorded as an
// adjustment), the audio lasts the 12 frames asked for, as LTX2Pipeline's.
TEST(Ltx2Checkpoints, OffGridFramesFloorTheVideoAndKeepTheAudioDuration) {
    const auto r = run_case("ltx2_ck_off_grid", "off_grid", case_args("off_grid", embeds_flag()));
    const auto * a = adjustment(r.report, "workload.frames");
    ASSERT_NE(a, nullptr) << r.report.at("adjustments").dump();
    EXPECT_EQ(a->at("requested"), 12);
    EXPECT_EQ(a->at("effective"), 11);
    EXPECT_NE(a->at("reason").get<std::string>().find("audio"), std::string::npos) << a->dump();
    EXPECT_EQ(r.report.at("workload").at("frames"), 11);
    EXPECT_EQ(r.report.at("outputs")[0].at("facts").at("frames"), 11);
}

// Item 8 (b): a Gemma-3 text encoder with attention biases, on every route of the text encoder: `ddo-host encode`
// equals LTX2Pipeline.encode_prompt (the biases applied as transformers' does), and the run from the prompt equals
// diffusers' on each route.
TEST(Ltx2Checkpoints, AGemmaWithAttentionBiasRunsOnEveryRoute) {
    const std::string prompt = "-p '" + case_of("gemma_bias").at("prompt").get<std::string>() + "'";
    const auto want = ddo::model::TensorFile::open_file(kFixtures / "gemma_bias_embeds.safetensors");
    const auto want_embeds = want.read("prompt_embeds");
    const auto bias = ddo::model::TensorFile::open_component(kFixtures / "checkpoint_gemma_bias" / "text_encoder");
    const auto q_bias = bias.read("language_model.model.layers.0.self_attn.q_proj.bias");
    EXPECT_GT(q_bias.abs().max().item<double>(), 0.0) << "the fixture's biases are not zero";
    struct Route {
        std::string name, flags;
    };
    const std::vector<Route> routes = {{"resident", "--preset off.toml"},
                                       {"component", "--set components.text_encoder.route=component"},
                                       {"dynamic", "--set components.text_encoder.route=dynamic"},
                                       {"group_block", "--set components.text_encoder.route=group_block"},
                                       {"group_leaf", "--set components.text_encoder.route=group_leaf"},
                                       {"disk", "--set components.text_encoder.route=disk"}};
    for (const auto & route : routes) {
        // ddo-host encode: the prompt embeddings against encode_prompt's.
        const fs::path embeds =
            fs::temp_directory_path() / ("ltx2_ck_bias_" + route.name + "_" + std::to_string(::getpid()) + ".safetensors");
        fs::remove(embeds);
        const std::string cmd = std::string("'") + DDO_HOST_BIN + "' encode --plugin ltx2 --model " +
                                quoted(kFixtures / "checkpoint_gemma_bias") + " " + prompt +
                                " --set plugin.ltx2_video.max_sequence_length=16 " + route.flags + " -o " +
                                quoted(embeds) + " --report " + ddo::test::quoted(fs::path(embeds.string() + ".json")) + " > " +
                                ddo::test::quoted(fs::path(embeds.string() + ".log")) + " 2>&1";
        const int rc = std::system(cmd.c_str());
        std::ifstream log_in(embeds.string() + ".log");
        const std::string log((std::istreambuf_iterator<char>(log_in)), {});
        EXPECT_EQ(rc, 0) << route.name << ": " << cmd << "\n" << log;
        if (rc == 0) {
            const auto got = ddo::model::TensorFile::open_file(embeds).read("prompt_embeds");
            ASSERT_EQ(got.sizes(), want_embeds.sizes()) << route.name;
            const double e = (got - want_embeds).abs().max().item<double>();
            EXPECT_LE(e, 1e-4) << route.name << ": the prompt embeddings vs LTX2Pipeline.encode_prompt";
            std::cout << "[ parity    ] biased Gemma-3 on " << route.name << ": prompt_embeds max abs error " << e
                      << " (tolerance 1e-4)\n";
        }
        for (const auto & p : {embeds, fs::path(embeds.string() + ".json"), fs::path(embeds.string() + ".log")}) fs::remove(p);

        // The whole run from the prompt.
        const auto r = run_case("ltx2_ck_bias_" + route.name, "gemma_bias", case_args("gemma_bias", prompt, route.flags));
        if (r.exit_code == 0) {
            EXPECT_EQ(r.report.at("routes").at("text_encoder").at("executed"), route.name) << route.name;
        }
    }
}

// Item 7: decode_timestep on a timestep-conditioned VAE, with decode_noise_scale and with its default (the timestep),
// and 0: the decode noise is LTX2Pipeline's draw after denoising from its generator, mixed into the normalised
// latents (Note [LTX-2 decode noise]). --save-latents holds the noised latents, so --decode-latents gives the one-shot
// bytes; a run with --image, whose draws ddo does not carry as the reference does, is refused (exit 2).
TEST(Ltx2Checkpoints, DecodeTimestepAndDecodeNoiseScaleEqualDiffusers) {
    const std::vector<std::pair<std::string, double>> cases = {
        {"decode_timestep", 0.025}, {"decode_timestep_default", 0.05}, {"decode_timestep_0", 0.0}};
    for (const auto & [name, scale] : cases) {
        const auto r = run_case("ltx2_ck_" + name, name, case_args(name, embeds_flag()));
        if (r.exit_code != 0) continue;
        EXPECT_EQ(r.report.at("workload").at("decode_noise_scale").get<double>(), scale) << name;
        EXPECT_EQ(r.report.at("workload").at("decode_timestep").get<double>(),
                  case_of(name).at("pipeline_args").at("decode_timestep").get<double>()) << name;
    }

    const fs::path latents =
        fs::temp_directory_path() / ("ltx2_ck_decode_noise_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(latents);
    std::string one_shot_wav, one_shot_mp4;
    const auto bytes_of = [](const fs::path & f) {
        std::ifstream in(f, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    auto r = run_ddo_host("ltx2_ck_noise_save", case_args("decode_timestep", embeds_flag(), "--save-latents " + quoted(latents)),
                          [&](const fs::path & dir) {
                              one_shot_wav = bytes_of(dir / "audio.wav");
                              one_shot_mp4 = bytes_of(dir / "video.mp4");
                          });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    r = run_ddo_host("ltx2_ck_noise_decode",
                     "--plugin ltx2 --model " + quoted(kFixtures / "checkpoint_tcond") + " --decode-latents " + quoted(latents),
                     [&](const fs::path & dir) {
                         EXPECT_EQ(bytes_of(dir / "audio.wav"), one_shot_wav);
                         EXPECT_EQ(bytes_of(dir / "video.mp4"), one_shot_mp4) << "the decode of the saved latents";
                     });
    EXPECT_EQ(r.exit_code, 0) << r.log;
    EXPECT_EQ(r.report.at("workload").at("decode_noise_scale").get<double>(), 0.025);
    // Another noise scale than the file's is refused.
    r = run_ddo_host("ltx2_ck_noise_decode_other", "--plugin ltx2 --model " + quoted(kFixtures / "checkpoint_tcond") +
                                                       " --decode-latents " + quoted(latents) +
                                                       " --set plugin.ltx2_video.decode_noise_scale=0.5");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("plugin.ltx2_video.decode_noise_scale"), std::string::npos) << r.log;
    fs::remove(latents);

    const fs::path png = fs::temp_directory_path() / ("ltx2_ck_noise_still_" + std::to_string(::getpid()) + ".png");
    std::vector<uint8_t> px(32 * 32 * 3, 128);
    ddo::model::write_png(png, px.data(), 32, 32, 3);
    r = run_ddo_host("ltx2_ck_noise_image", case_args("decode_timestep", embeds_flag(), "--image " + quoted(png)));
    fs::remove(png);
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("decode_noise_scale=0"), std::string::npos) << "says how to run it\n" << r.log;
}
