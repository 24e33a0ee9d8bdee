// ddo-host --plugin ltx2 from an image (issue 28): --image FILE (LTX2ImageToVideoPipeline), --image FILE@FRAME
// (LTX2ConditionPipeline keyframes) and plugin.ltx2_video.upsampler (the distilled two-stage composition), each run
// from the PNG file through the whole chain (read, resize, VAE encoder, conditioning, DiT, decoders) and compared with
// diffusers' waveform (tools/reference/ltx2_conditioning_fixtures.py, ltx2_two_stage_fixtures.py): the WAV within
// 16-bit rounding (the audio follows the video through the a2v cross-attention, so a wrong condition shows there);
// the report's conditioning, phases and counters; refusals (exit 2, report written).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "ddo/media/media_decode.hpp"
#include "ddo/model/tensor_file.hpp"
#include "e2e/host_run.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kCond = LTX2_CONDITIONING_FIXTURE_DIR;
const fs::path kTwo = LTX2_TWO_STAGE_FIXTURE_DIR;

bool have_fixtures() { return fs::exists(kCond / "reference.json") && fs::exists(kTwo / "reference.json"); }

std::string sigma_list(const nlohmann::json & sigmas) {
    std::string s;
    for (double v : sigmas) s += (s.empty() ? "" : ",") + nlohmann::json(v).dump();
    return "[" + s + "]";
}

// The plain LTX-2.0 case (2 steps, every guidance off) on `ckpt`.
std::string plain_args(const fs::path & dir, const std::string & ckpt) {
    return "--plugin ltx2 --model " + quoted(dir / ckpt) + " --prompt-embeds " + quoted(dir / "prompt_embeds.safetensors") +
           " --width 32 --height 32 --frames 5 --fps 25 --steps 2 --cfg-scale 1 --set plugin.ltx2_video.stg_scale=0"
           " --set plugin.ltx2_video.modality_scale=1 --set plugin.ltx2_video.guidance_rescale=0"
           " --set plugin.ltx2_video.audio_guidance_scale=1 --set plugin.ltx2_video.audio_stg_scale=0"
           " --set plugin.ltx2_video.audio_modality_scale=1 --set plugin.ltx2_video.audio_guidance_rescale=0"
           " --set plugin.ltx2_video.use_cross_timestep=false --set plugin.ltx2_video.image_crf=0 ";
}

// The WAV against the reference's waveform `want` [2, samples]: 16-bit rounding (+ the clip to [-1, 1]).
void expect_wav(const fs::path & wav_path, const at::Tensor & want, const std::string & what) {
    const auto wav = ddo::media::decode_audio(wav_path);
    ASSERT_EQ(wav.channels, 2);
    ASSERT_EQ(wav.frames, want.size(1)) << what;
    double err = 0;
    const auto w = want.contiguous().to(at::kDouble);
    const auto * p = w.data_ptr<double>();
    for (int64_t c = 0; c < 2; ++c)
        for (int64_t i = 0; i < wav.frames; ++i)
            err = std::max(err, std::abs(double(wav.samples[size_t(c * wav.frames + i)]) -
                                         std::clamp(p[c * wav.frames + i], -1.0, 1.0)));
    std::cout << "[ parity    ] " << what << ": audio.wav vs diffusers' waveform: max abs error " << err
              << " (tolerance 1/32768)\n";
    EXPECT_LE(err, 1.0 / 32768) << what;
}

std::vector<std::string> phases_of(const nlohmann::json & rep) {
    std::vector<std::string> names;
    for (const auto & p : rep.at("phases")) names.push_back(p.at("name"));
    return names;
}

bool has(const std::vector<std::string> & v, const std::string & s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

TEST(Ltx2Conditioning, ImageToVideoFromThePngEqualsDiffusers) {
    if (!have_fixtures()) GTEST_SKIP() << "fixtures missing: build ltx2_conditioning_fixtures, ltx2_two_stage_fixtures";
    const auto want = ddo::model::TensorFile::open_file(kCond / "i2v_20.safetensors").read("audio");
    const auto r = run_ddo_host("ltx2_i2v", plain_args(kCond, "checkpoint_20") + "--image " + quoted(kCond / "still.png"),
                                [&](const fs::path & dir) { expect_wav(dir / "audio.wav", want, "I2V (still.png)"); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & rep = r.report;
    const auto & c = rep.at("workload").at("conditioning");
    EXPECT_EQ(c.at("pipeline"), "LTX2ImageToVideoPipeline") << c.dump();
    EXPECT_EQ(c.at("image_crf"), 0);
    const auto phases = phases_of(rep);
    EXPECT_TRUE(has(phases, "encode_image")) << rep.at("phases").dump();
    ASSERT_TRUE(rep.at("counters").contains("vae_encoder")) << rep.at("counters").dump();
    EXPECT_EQ(rep.at("counters").at("vae_encoder").value("unloaded", false), true);
    EXPECT_TRUE(rep.at("inputs").dump().find("still.png") != std::string::npos) << rep.at("inputs").dump();
}

TEST(Ltx2Conditioning, KeyframeFromThePngEqualsDiffusers) {
    if (!have_fixtures()) GTEST_SKIP() << "fixtures missing";
    // kf_20: keyframe.png at latent frame 1 = pixel frame 1 (the tiny VAE compresses time by 2).
    const auto want = ddo::model::TensorFile::open_file(kCond / "kf_20.safetensors").read("audio");
    const auto r = run_ddo_host("ltx2_kf", plain_args(kCond, "checkpoint_20") + "--image " +
                                               quoted(kCond / "keyframe.png") + "@1",
                                [&](const fs::path & dir) { expect_wav(dir / "audio.wav", want, "keyframe@1"); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    EXPECT_EQ(r.report.at("workload").at("conditioning").at("pipeline"), "LTX2ConditionPipeline");
    EXPECT_EQ(r.report.at("workload").at("conditioning").at("conditions")[0].at("latent_index"), 1);
}

TEST(Ltx2Conditioning, TwoStageEqualsDiffusersComposition) {
    if (!have_fixtures()) GTEST_SKIP() << "fixtures missing";
    const auto ref = nlohmann::json::parse(std::ifstream(kTwo / "reference.json"));
    for (const std::string name : {"t2v", "i2v"}) {
        const auto want = ddo::model::TensorFile::open_file(kTwo / (name + ".safetensors")).read("audio");
        // The recipe: guidance_scale 1 in both stages, every other setting the pipeline's default.
        std::string args = "--plugin ltx2 --model " + quoted(kTwo / "checkpoint") + " --prompt-embeds " +
                           quoted(kTwo / "prompt_embeds.safetensors") +
                           " --width 64 --height 64 --frames 5 --fps 25 --cfg-scale 1 --set 'workload.sigmas=" +
                           sigma_list(ref.at("stage1_sigmas")) + "' --set plugin.ltx2_video.upsampler=" +
                           quoted(kTwo / "checkpoint" / "latent_upsampler") + " --set plugin.ltx2_video.image_crf=0";
        if (name == "i2v") args += " --image " + quoted(kTwo / "still.png");
        const auto r = run_ddo_host("ltx2_two_" + name, args, [&](const fs::path & dir) {
            expect_wav(dir / "audio.wav", want, "two-stage " + name);
        });
        ASSERT_EQ(r.exit_code, 0) << r.log;
        const auto & rep = r.report;
        const auto phases = phases_of(rep);
        for (const char * p : {"denoise", "upsample", "denoise_stage2", "decode"})
            EXPECT_TRUE(has(phases, p)) << name << ": phase " << p << " missing: " << rep.at("phases").dump();
        const auto & ts = rep.at("workload").at("two_stage");
        EXPECT_EQ(ts.at("stage1").at("width"), 32) << ts.dump();
        EXPECT_EQ(ts.at("stage2").at("noise_scale"), ref.at("stage2_sigmas").at(0)) << ts.dump();
        ASSERT_TRUE(rep.at("counters").contains("latent_upsampler")) << rep.at("counters").dump();
        EXPECT_EQ(rep.at("counters").at("latent_upsampler").value("unloaded", false), true);
        // The DiT is loaded once for both stages: unloaded in stage 2's phase.
        EXPECT_EQ(rep.at("counters").at("transformer").value("unloaded_in_phase", ""), "denoise_stage2")
            << rep.at("counters").at("transformer").dump();
    }
}

TEST(Ltx2Conditioning, BadInputIsRefusedWithTheReportWritten) {
    if (!have_fixtures()) GTEST_SKIP() << "fixtures missing";
    const fs::path junk = fs::temp_directory_path() / ("ddo_not_an_image_" + std::to_string(::getpid()) + ".png");
    std::ofstream(junk) << "this is text, not a PNG\n";
    const fs::path too_wide = fs::temp_directory_path() / ("ddo_bad_upsampler_" + std::to_string(::getpid()));
    struct Case {
        std::string name, args, expect;
    };
    const std::string base = plain_args(kCond, "checkpoint_20");
    const Case cases[] = {
        {"not_an_image", "--image " + quoted(junk), "not_an_image"},
        {"off_grid", "--image " + quoted(kCond / "still.png") + "@2", "not on the latent grid"},
        {"past_the_clip", "--image " + quoted(kCond / "still.png") + "@9", "the clip has frames 0..4"},
        {"strength", "--image " + quoted(kCond / "still.png") + " --strength 0.5", "workload.strength"},
        {"crf", "--image " + quoted(kCond / "still.png") + " --set plugin.ltx2_video.image_crf=60", "image_crf"},
        {"upsampler_missing", "--set plugin.ltx2_video.upsampler=/nonexistent/latent_upsampler --width 64 --height 64",
         "plugin.ltx2_video.upsampler"},
    };
    for (const auto & c : cases) {
        const auto r = run_ddo_host("ltx2_bad_" + c.name, base + c.args);
        EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.log;
        EXPECT_NE(r.log.find(c.expect == "not_an_image" ? junk.filename().string() : c.expect), std::string::npos)
            << c.name << ": " << r.log;
        ASSERT_FALSE(r.report.is_null()) << c.name << ": no report";
        EXPECT_EQ(r.report.at("status"), "failed") << c.name;
    }
    fs::remove(junk);
    fs::remove_all(too_wide);
}
