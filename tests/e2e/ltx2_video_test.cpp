// ddo-host --plugin ltx2 on the pipeline fixtures (tools/reference/ltx2_pipeline_fixtures.py): the fully guided tiny
// LTX-2.3 case written as video.mp4 + audio.wav (what a player sees: one H.264 stream with the requested frames and
// fps, one stereo AAC stream of the waveform's duration; the WAV equal to diffusers' waveform within 16-bit
// rounding), the report's routes, unloads at the phase boundaries and zero outstanding owners; the DiT on the
// resident, dynamic and disk routes writing the same bytes; malformed checkpoints failing before denoising with the
// tensor and the file named (exit 4, report written); refusals before loading (exit 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <fstream>
#include <vector>
#include <iostream>

#include <nlohmann/json.hpp>

#include "ddo/media/media_decode.hpp"
#include "ddo/media/media_probe.hpp"
#include "ddo/model/tensor_file.hpp"
#include "ddo/model/tensor_output.hpp"
#include "ddo/util/file_digest.hpp"
#include "e2e/host_run.hpp"
#include "e2e/ltx2_e2e_support.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kFixtures = LTX2_PIPELINE_FIXTURE_DIR;

// The guided LTX-2.3 case of the fixtures, as ddo-host flags (plugin options = LTX2Pipeline's arguments).
std::string guided_args(const fs::path & ckpt, const std::string & extra = "") {
    const auto ref = nlohmann::json::parse(std::ifstream(kFixtures / "reference.json"));
    std::string sig;
    for (double v : ref.at("cases").at("23").at("settings").at("sigmas")) sig += (sig.empty() ? "" : ",") + nlohmann::json(v).dump();
    return "--plugin ltx2 --model " + quoted(ckpt) + " --prompt-embeds " +
           quoted(kFixtures / "prompt_embeds.safetensors") +
           " --width 32 --height 32 --frames 5 --fps 25 --cfg-scale 3 --set 'workload.sigmas=[" + sig + "]'" +
           " --set plugin.ltx2_video.stg_blocks=[1] --set plugin.ltx2_video.audio_guidance_scale=7 " + extra;
}

}  // namespace

TEST(Ltx2VideoHost, WritesMp4AndWavEqualToDiffusers) {
    std::string sha_mp4, sha_wav;
    // low_ram_safe with the tiny DiT's resident set capped at about one block: the others stream every pass, as the
    // real model's do under this preset.
    const auto r = run_ddo_host("ltx2_guided", guided_args(kFixtures / "checkpoint_23", "--preset low_ram_safe.toml "
                                                           "--set components.transformer.resident_budget_gb=0.00004"),
                                [&](const fs::path & dir) {
        ASSERT_TRUE(fs::exists(dir / "video.mp4"));
        ASSERT_TRUE(fs::exists(dir / "audio.wav"));
        const auto p = ddo::media::probe_media(dir / "video.mp4");
        ASSERT_EQ(p.count(ddo::media::StreamKind::video), 1);
        ASSERT_EQ(p.count(ddo::media::StreamKind::audio), 1);
        const auto * v = p.first(ddo::media::StreamKind::video);
        EXPECT_EQ(v->codec, "h264");
        EXPECT_EQ(v->packets, 5);
        EXPECT_EQ(v->fps_num, 25);
        EXPECT_EQ(v->fps_den, 1);
        EXPECT_EQ(v->width, 32);
        EXPECT_EQ(v->height, 32);
        const auto * a = p.first(ddo::media::StreamKind::audio);
        EXPECT_EQ(a->codec, "aac");
        EXPECT_EQ(a->channels, 2);
        EXPECT_EQ(a->sample_rate, 48000);
        const auto want = ddo::model::TensorFile::open_file(kFixtures / "pipeline_23.safetensors").read("audio");
        const double seconds = double(want.size(1)) / 48000.0;
        EXPECT_NEAR(a->duration_s, seconds, 1024.0 / 48000.0) << "the AAC stream lasts the waveform's duration";
        std::cout << "[ mp4       ] h264 " << v->packets << " frames at " << v->fps_num << "/" << v->fps_den
                  << " fps; aac " << a->channels << " ch " << a->sample_rate << " Hz " << a->duration_s << " s (waveform "
                  << seconds << " s)\n";
        // The WAV holds diffusers' waveform as 16-bit PCM: within half a step of rounding (+ the clip to [-1, 1]).
        const auto wav = ddo::media::decode_audio(dir / "audio.wav");
        ASSERT_EQ(wav.channels, 2);
        ASSERT_EQ(wav.frames, want.size(1));
        double err = 0;
        const auto w = want.contiguous();
        for (int64_t c = 0; c < 2; ++c)
            for (int64_t i = 0; i < wav.frames; ++i) {
                const double ref = std::clamp(double(w[c][i].item<float>()), -1.0, 1.0);
                err = std::max(err, std::abs(double(wav.samples[size_t(c * wav.frames + i)]) - ref));
            }
        std::cout << "[ parity    ] audio.wav vs diffusers' waveform: max abs error " << err << " (tolerance 1/32768)\n";
        EXPECT_LE(err, 1.0 / 32768);
        sha_mp4 = ddo::file_sha256(dir / "video.mp4").value_or("");
        sha_wav = ddo::file_sha256(dir / "audio.wav").value_or("");
    });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & rep = r.report;
    EXPECT_EQ(rep.at("status"), "completed");
    // Outputs: both files, hashed as written.
    ASSERT_EQ(rep.at("outputs").size(), 2u);
    EXPECT_EQ(rep.at("outputs")[0].at("kind"), "video/mp4");
    EXPECT_EQ(rep.at("outputs")[0].at("sha256"), sha_mp4);
    EXPECT_EQ(rep.at("outputs")[0].at("facts").at("frames"), 5);
    EXPECT_EQ(rep.at("outputs")[1].at("kind"), "audio/wav");
    EXPECT_EQ(rep.at("outputs")[1].at("sha256"), sha_wav);
    // Every component on the engine, unloaded at its phase boundary with no outstanding owner.
    const std::pair<const char *, const char *> unloads[] = {{"connectors", "encode"}, {"transformer", "denoise"},
                                                             {"vae", "decode"}, {"audio_vae", "decode_audio"},
                                                             {"vocoder", "decode_audio"}};
    for (const auto & [c, phase] : unloads) {
        ASSERT_TRUE(rep.at("routes").contains(c)) << c;
        const auto & k = rep.at("counters").at(c);
        EXPECT_EQ(k.at("unloaded_in_phase"), phase) << c;
        EXPECT_EQ(k.at("engine").at("counters").at("outstanding_owners"), 0) << c;
    }
    // The streamed blocks: bytes in the report.
    EXPECT_GT(rep.at("counters").at("transformer").at("bytes_streamed").get<uint64_t>(), 0u);
    int denoise_steps = 0;
    for (const auto & st : rep.at("steps")) denoise_steps += st.at("phase") == "denoise";
    EXPECT_EQ(denoise_steps, 8);
    EXPECT_EQ(rep.at("workload").at("passes_per_step"), 3);
    EXPECT_TRUE(rep.at("workload").at("stg_effective").get<bool>());
}

TEST(Ltx2VideoHost, DitRoutesWriteTheSameBytes) {
    std::map<std::string, std::pair<std::string, std::string>> sha;
    for (const char * route : {"resident", "dynamic", "disk"}) {
        // dynamic with a resident budget of about one block, so that the other blocks stream every pass.
        std::string extra = std::string("--set components.transformer.route=") + route;
        if (std::string(route) == "dynamic") extra += " --set components.transformer.resident_budget_gb=0.00004";
        const auto r = run_ddo_host(std::string("ltx2_route_") + route, guided_args(kFixtures / "checkpoint_23", extra),
                                    [&](const fs::path & dir) {
                                        sha[route] = {ddo::file_sha256(dir / "video.mp4").value_or("?"),
                                                      ddo::file_sha256(dir / "audio.wav").value_or("?")};
                                    });
        ASSERT_EQ(r.exit_code, 0) << route << "\n" << r.log;
        EXPECT_EQ(r.report.at("routes").at("transformer").at("executed"), route);
        if (std::string(route) != "resident") {
            EXPECT_GT(r.report.at("counters").at("transformer").at("bytes_streamed").get<uint64_t>(), 0u) << route;
        }
    }
    EXPECT_EQ(sha["dynamic"], sha["resident"]);
    EXPECT_EQ(sha["disk"], sha["resident"]);
}

TEST(Ltx2VideoHost, MalformedCheckpointsFailBeforeDenoisingExit4) {
    ddo::test::expect_missing_and_misshapen_tensors_exit4(kFixtures / "checkpoint_23", "ltx2",
                                                          [](const fs::path & ckpt) { return guided_args(ckpt); });
    {  // an LTX-2.0 config over LTX-2.3 weights: the 2.0 caption projection is missing
        const auto ckpt = ddo::test::broken_copy(kFixtures / "checkpoint_23", "ltx2_broken_config20");
        fs::copy_file(kFixtures / "checkpoint_20" / "transformer" / "config.json", ckpt / "transformer" / "config.json",
                      fs::copy_options::overwrite_existing);
        ddo::test::expect_exit4_before_denoise("ltx2_bad_config20", guided_args(ckpt), ckpt, "caption_projection");
        fs::remove_all(ckpt);
    }
}

TEST(Ltx2VideoHost, RefusalsBeforeLoadingExit2) {
    // A text prompt needs the Gemma-3 encoder.
    auto r =
        run_ddo_host("ltx2_prompt", "--plugin ltx2 --model " + quoted(kFixtures / "checkpoint_23") + " -p 'a cat'");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("--prompt-embeds"), std::string::npos) << r.log;
    // A block that does not exist.
    r = run_ddo_host("ltx2_stg", guided_args(kFixtures / "checkpoint_23", "--set plugin.ltx2_video.stg_blocks=[7]"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("plugin.ltx2_video.stg_blocks"), std::string::npos) << r.log;
    EXPECT_EQ(r.report.at("status"), "failed");
    // An option the plugin does not have.
    r = run_ddo_host("ltx2_option", guided_args(kFixtures / "checkpoint_23", "--set plugin.ltx2_video.stg_scales=1"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("stg_scale"), std::string::npos) << r.log << ": suggests the nearest key";
}

namespace {

const fs::path kTextFixtures = LTX2_TEXT_FIXTURE_DIR;

// The text fixtures' "guidance_3" run (tools/reference/ltx2_text_fixtures.py): 2 steps, CFG 3 for video and audio,
// every other guidance off, max_sequence_length 16.
std::string text_args(const std::string & source) {
    return "--plugin ltx2 --model " + quoted(kTextFixtures / "checkpoint_text") + " " + source +
           " --cfg-scale 3 --width 32 --height 32 --frames 5 --fps 25 --steps 2 --set plugin.ltx2_video.stg_scale=0"
           " --set plugin.ltx2_video.modality_scale=1 --set plugin.ltx2_video.guidance_rescale=0"
           " --set plugin.ltx2_video.audio_guidance_scale=3 --set plugin.ltx2_video.audio_stg_scale=0"
           " --set plugin.ltx2_video.audio_modality_scale=1 --set plugin.ltx2_video.audio_guidance_rescale=0"
           " --set plugin.ltx2_video.use_cross_timestep=false --set plugin.ltx2_video.max_sequence_length=16"
           " --preset low_ram_safe.toml";
}

double wav_error(const fs::path & wav_file, const at::Tensor & want) {
    const auto wav = ddo::media::decode_audio(wav_file);
    EXPECT_EQ(wav.frames, want.size(1));
    if (wav.frames != want.size(1)) return 1e30;
    double err = 0;
    for (int64_t c = 0; c < 2; ++c)
        for (int64_t i = 0; i < wav.frames; ++i)
            err = std::max(err, std::abs(double(wav.samples[size_t(c * wav.frames + i)]) -
                                         std::clamp(double(want[c][i].item<float>()), -1.0, 1.0)));
    return err;
}

}  // namespace

TEST(Ltx2VideoHost, FromTextEqualsDiffusersAndEncodeReproducesIt) {
    const auto want = ddo::model::TensorFile::open_file(kTextFixtures / "pipeline_text.safetensors").read("guidance_3.audio");
    std::string sha_text;
    const auto r = run_ddo_host("ltx2_text", text_args("-p 'a robot dancing in the rain'"), [&](const fs::path & dir) {
        const double e = wav_error(dir / "audio.wav", want);
        std::cout << "[ parity    ] -p: audio.wav vs diffusers' waveform from the prompt: max abs error " << e
                  << " (tolerance 1/32768)\n";
        EXPECT_LE(e, 1.0 / 32768);
        sha_text = ddo::file_sha256(dir / "audio.wav").value_or("?");
    });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & k = r.report.at("counters").at("text_encoder");
    EXPECT_EQ(k.at("unloaded_in_phase"), "encode") << "the text encoder leaves memory before the connectors and the DiT";
    EXPECT_EQ(k.at("engine").at("counters").at("outstanding_owners"), 0);
    EXPECT_GT(k.at("bytes_streamed").get<uint64_t>(), 0u) << "low_ram_safe streams the text encoder's layers";
    EXPECT_EQ(r.report.at("workload").at("negative_prompt"), "");
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(r.report, &problems), (std::vector<std::string>{"latent_upsampler"})) << "a one-stage run from a prompt";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }

    // ddo-host encode writes the embeddings; a run from them writes the same bytes.
    const fs::path embeds = fs::temp_directory_path() / ("ltx2_embeds_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(embeds);
    const fs::path encode_report = embeds.string() + ".report.json";
    const std::string cmd = std::string("'") + DDO_HOST_BIN + "' encode --plugin ltx2 --model " +
                            quoted(kTextFixtures / "checkpoint_text") + " -p 'a robot dancing in the rain' -n '' --set "
                            "plugin.ltx2_video.max_sequence_length=16 -o " + quoted(embeds) + " --report " +
                            quoted(encode_report) + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    ASSERT_TRUE(fs::exists(embeds));
    const auto er = nlohmann::json::parse(std::ifstream(encode_report));
    EXPECT_EQ(er.at("status"), "completed");
    EXPECT_EQ(er.at("outputs")[0].at("kind"), "application/x-safetensors");
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(er, &problems), (std::vector<std::string>{"audio_vae", "connectors", "latent_upsampler", "transformer", "vae", "vocoder"})) << "ddo-host encode runs Gemma-3 only";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    fs::remove(encode_report);
    const auto f = ddo::model::TensorFile::open_file(embeds);
    EXPECT_TRUE(f.contains("negative_prompt_embeds"));
    const auto again =
        run_ddo_host("ltx2_from_encoded", text_args("--prompt-embeds " + quoted(embeds)), [&](const fs::path & dir) {
            EXPECT_EQ(ddo::file_sha256(dir / "audio.wav").value_or("!"), sha_text);
        });
    EXPECT_EQ(again.exit_code, 0) << again.log;
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(again.report, &problems), (std::vector<std::string>{"latent_upsampler", "text_encoder"})) << "embeddings from a file: no text encoder";
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }
    fs::remove(embeds);
}

// A non-finite sigma schedule (LTX-2.0's shift_terminal on a one-step grid divides by zero, as in the reference) is
// refused with exit 2 before the first denoising step, naming the cause and the fix; nothing is written.
TEST(Ltx2VideoHost, ANonFiniteScheduleIsRefusedBeforeTheFirstStep) {
    const auto r = run_ddo_host("ltx2_one_step", "--plugin ltx2 --model " + quoted(kFixtures / "checkpoint_20") +
                                                     " --prompt-embeds " + quoted(kFixtures / "prompt_embeds.safetensors") +
                                                     " --width 32 --height 32 --frames 5 --fps 25 --steps 1");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_EQ(r.report.at("status").get<std::string>(), "failed") << r.report.dump().substr(0, 400);
    EXPECT_NE(r.log.find("schedule is not finite"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("more steps"), std::string::npos) << r.log;
    for (const auto & step : r.report.at("steps")) EXPECT_NE(step.value("phase", ""), "denoise") << r.report.at("steps").dump();
    EXPECT_TRUE(r.report.at("outputs").empty());
}

// Issue 28 item 5, outputs a pipeline can use (Note [Latents files and streamed outputs]): --save-latents writes the
// decode inputs before decoding, --decode-latents decodes such a file alone (no text encoder, connectors or DiT), and
// both give the one-shot run's bytes: the PNG frames (plugin.ltx2_video.frames_png, or -o DIR/%05d.png), the WAV and
// the MP4 (same encoder settings).
namespace {

struct ClipBytes {
    std::string mp4, wav;
    std::vector<std::string> pngs;
};

// The outputs of a run in `dir`: video.mp4, audio.wav and `frames` PNG frames named by `png_of(i)`.
ClipBytes clip_bytes(const fs::path & dir, int frames, const std::function<fs::path(int)> & png_of) {
    ClipBytes b;
    b.mp4 = ddo::file_sha256(dir / "video.mp4").value_or("missing");
    b.wav = ddo::file_sha256(dir / "audio.wav").value_or("missing");
    for (int i = 0; i < frames; ++i) b.pngs.push_back(ddo::file_sha256(png_of(i)).value_or("missing"));
    return b;
}

std::function<fs::path(int)> video_pngs(const fs::path & dir) {
    return [dir](int i) {
        char name[32];
        std::snprintf(name, sizeof name, "video_%05d.png", i);
        return dir / name;
    };
}

std::string decode_args(const fs::path & ckpt, const fs::path & latents, const std::string & extra = "") {
    return "--plugin ltx2 --model " + quoted(ckpt) + " --decode-latents " + quoted(latents) + " " + extra;
}

// A fresh temp directory for files that outlive one run_ddo_host call (its directory is removed after each run).
fs::path scratch_dir(const std::string & tag) {
    const fs::path d = fs::temp_directory_path() / ("ddo_e2e_" + std::to_string(::getpid()) + "_" + tag);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

}  // namespace

TEST(Ltx2VideoHost, SaveLatentsThenDecodeLatentsGivesTheOneShotBytes) {
    const fs::path ckpt = kFixtures / "checkpoint_23";
    const fs::path keep = scratch_dir("latents_keep");
    const fs::path latents = keep / "clip.latents.safetensors";
    const std::string frames_png = " --set plugin.ltx2_video.frames_png=true";
    ClipBytes one_shot, saved, decoded, patterned;
    auto r = run_ddo_host("ltx2_one_shot", guided_args(ckpt, frames_png),
                          [&](const fs::path & dir) { one_shot = clip_bytes(dir, 5, video_pngs(dir)); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    ASSERT_EQ(r.report.at("outputs").size(), 3u);
    const auto & seq = r.report.at("outputs")[2];
    EXPECT_EQ(seq.at("kind"), "image/png");
    EXPECT_EQ(seq.at("facts").at("frames"), 5);
    EXPECT_NE(seq.at("facts").at("last").get<std::string>().find("video_00004.png"), std::string::npos);
    // The frames are the MP4's input: the same RGB24 pixels hashed on both.
    EXPECT_EQ(seq.at("facts").at("pixels_sha256"), r.report.at("outputs")[0].at("facts").at("streamed").at("pixels_sha256"));

    r = run_ddo_host("ltx2_save", guided_args(ckpt, frames_png + " --save-latents " + quoted(latents)),
                     [&](const fs::path & dir) { saved = clip_bytes(dir, 5, video_pngs(dir)); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    ASSERT_TRUE(fs::exists(latents));
    EXPECT_EQ(r.report.at("outputs")[0].at("kind"), "application/x-safetensors");
    EXPECT_EQ(r.report.at("outputs")[0].at("sha256"), ddo::file_sha256(latents).value_or("?"));
    std::vector<std::string> phases;
    for (const auto & p : r.report.at("phases")) phases.push_back(p.at("name"));
    const auto at = [&](const char * n) { return std::find(phases.begin(), phases.end(), n) - phases.begin(); };
    EXPECT_LT(at("save_latents"), at("decode_audio")) << "written before the first decoder loads";
    EXPECT_LT(at("decode_audio"), at("decode"));
    {  // the file: the decode inputs and the workload
        const auto f = ddo::model::TensorFile::open_file(latents);
        EXPECT_EQ(f.shape_of("video_latents"), (std::vector<int64_t>{1, 4, 3, 16, 16}));
        EXPECT_EQ(f.shape_of("audio_latents").size(), 4u);
        EXPECT_EQ(f.metadata().at("format"), "ddo.ltx2_video.latents");
        const auto w = nlohmann::json::parse(f.metadata().at("workload"));
        EXPECT_EQ(w.at("width"), 32);
        EXPECT_EQ(w.at("frames"), 5);
        EXPECT_EQ(w.at("fps"), 25.0);
        EXPECT_EQ(w.at("steps"), 8);
        const auto dec = nlohmann::json::parse(f.metadata().at("decoders"));
        for (const char * c : {"vae", "audio_vae", "vocoder"}) EXPECT_TRUE(dec.at(c).contains("files")) << c;
    }

    r = run_ddo_host("ltx2_decode", decode_args(ckpt, latents, frames_png),
                     [&](const fs::path & dir) { decoded = clip_bytes(dir, 5, video_pngs(dir)); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    EXPECT_EQ(r.report.at("workload").at("mode"), "decode_only");
    EXPECT_EQ(r.report.at("identity").at("checkpoint").at("inputs").at("latents").at("sha256"),
              ddo::file_sha256(latents).value_or("?"));
    for (const char * c : {"text_encoder", "connectors", "transformer"})
        EXPECT_FALSE(r.report.at("counters").contains(c)) << c << " is not loaded to decode";
    for (const auto & p : r.report.at("phases")) EXPECT_NE(p.at("name"), "denoise");
    {
        std::string problems;
        EXPECT_EQ(ddo::test::every_route_reported(r.report, &problems),
                  (std::vector<std::string>{"connectors", "latent_upsampler", "text_encoder", "transformer"}));
        EXPECT_EQ(problems, "") << "components with no executed route and no reason";
    }

    // -o DIR/%05d.png: the frames under the pattern, the MP4 and the WAV beside them.
    r = run_ddo_host("ltx2_decode_pattern", decode_args(ckpt, latents), [&](const fs::path & dir) {
        const std::string cmd = std::string("'") + DDO_HOST_BIN + "' " + decode_args(ckpt, latents) + " -o " +
                                quoted(dir / "frames" / "%05d.png") + " --report " + quoted(dir / "p.json") +
                                " > /dev/null 2>&1";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
        patterned = clip_bytes(dir / "frames", 5, [&](int i) {
            char name[16];
            std::snprintf(name, sizeof name, "%05d.png", i);
            return dir / "frames" / name;
        });
    });
    ASSERT_EQ(r.exit_code, 0) << r.log;

    for (const auto * b : {&saved, &decoded, &patterned}) {
        EXPECT_EQ(b->mp4, one_shot.mp4);
        EXPECT_EQ(b->wav, one_shot.wav);
        EXPECT_EQ(b->pngs, one_shot.pngs);
    }
    for (const auto & s : one_shot.pngs) EXPECT_NE(s, "missing");
    std::cout << "[ latents   ] one-shot = --save-latents = --decode-latents = -o %05d.png: mp4 "
              << ddo::short_digest(one_shot.mp4) << ", wav " << ddo::short_digest(one_shot.wav) << ", 5 PNG frames\n";
    fs::remove_all(keep);
}

// A SIGTERM while the video decodes (DDO_TEST_SIGNAL_AT_PHASE=decode: the process signals itself as the phase
// begins) ends the run (exit 143, report interrupted) with the latents file written and no MP4 or temp file left;
// --decode-latents then completes with the one-shot run's bytes.
TEST(Ltx2VideoHost, SigtermDuringDecodeKeepsTheLatentsAndDecodeLatentsCompletes) {
    const fs::path ckpt = kFixtures / "checkpoint_23";
    const fs::path keep = scratch_dir("latents_sigterm");
    const fs::path latents = keep / "clip.latents.safetensors";
    ClipBytes one_shot, decoded;
    auto r = run_ddo_host("ltx2_sig_one_shot", guided_args(ckpt),
                          [&](const fs::path & dir) { one_shot = clip_bytes(dir, 0, {}); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    ::setenv("DDO_TEST_SIGNAL_AT_PHASE", "decode", 1);
    r = run_ddo_host("ltx2_sig", guided_args(ckpt, "--save-latents " + quoted(latents)), [&](const fs::path & dir) {
        EXPECT_FALSE(fs::exists(dir / "video.mp4"));
        EXPECT_FALSE(fs::exists(dir / "audio.wav"));
        for (const auto & e : fs::directory_iterator(dir))
            EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    });
    ::unsetenv("DDO_TEST_SIGNAL_AT_PHASE");
    EXPECT_EQ(r.exit_code, 143) << r.log;
    EXPECT_EQ(r.report.at("status"), "interrupted");
    EXPECT_NE(r.report.at("error").at("message").get<std::string>().find("decoding"), std::string::npos)
        << r.report.at("error").dump();
    ASSERT_EQ(r.report.at("outputs").size(), 1u);
    EXPECT_EQ(r.report.at("outputs")[0].at("kind"), "application/x-safetensors");
    ASSERT_TRUE(fs::exists(latents));

    r = run_ddo_host("ltx2_sig_decode", decode_args(ckpt, latents),
                     [&](const fs::path & dir) { decoded = clip_bytes(dir, 0, {}); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    EXPECT_EQ(decoded.mp4, one_shot.mp4);
    EXPECT_EQ(decoded.wav, one_shot.wav);
    fs::remove_all(keep);
}

// Bad latents files and flags that contradict one are refused before decoding (exit 2) naming the file and what
// differs, the report written (failed, no output): not safetensors, a safetensors file of another kind, a tensor of
// the wrong shape, a file whose workload is of another geometry than its tensors, another checkpoint's decoders, a
// --width that differs from the file's, --save-latents with --decode-latents; --save-latents to another plugin.
TEST(Ltx2VideoHost, BadLatentsFilesAreRefusedExit2) {
    const fs::path ckpt = kFixtures / "checkpoint_23";
    const fs::path keep = scratch_dir("latents_bad");
    const fs::path good = keep / "good.safetensors";
    ASSERT_EQ(run_ddo_host("ltx2_bad_save", guided_args(ckpt, "--save-latents " + quoted(good))).exit_code, 0);
    const auto f = ddo::model::TensorFile::open_file(good);
    const auto rewrite = [&](const std::string & name, const std::function<void(ddo::model::NamedTensors &,
                                                                                  std::map<std::string, std::string> &)> & edit) {
        ddo::model::NamedTensors t;
        for (const auto & n : f.names()) t.push_back({n, f.read(n)});
        auto meta = f.metadata();
        edit(t, meta);
        const fs::path p = keep / name;
        std::ofstream(p, std::ios::binary) << ddo::model::encode_safetensors(t, meta);
        return p;
    };
    const fs::path text = keep / "not_safetensors.safetensors";
    std::ofstream(text) << "not a tensor file\n";
    const fs::path wrong_shape = rewrite("wrong_shape.safetensors", [](auto & t, auto &) {
        for (auto & [n, v] : t)
            if (n == "video_latents") v = at::zeros({1, 4, 3, 16, 8});
    });
    const fs::path other_geometry = rewrite("other_geometry.safetensors", [](auto &, auto & meta) {
        auto w = nlohmann::json::parse(meta.at("workload"));
        w["width"] = 64;
        meta["workload"] = w.dump();
    });
    struct Case {
        std::string tag, args, names;
    };
    const std::vector<Case> cases = {
        {"text", decode_args(ckpt, text), text.string()},
        {"embeds", decode_args(ckpt, kFixtures / "prompt_embeds.safetensors"), "not an LTX-2 latents file"},
        {"shape", decode_args(ckpt, wrong_shape), "[1, 4, 3, 16, 8]"},
        {"geometry", decode_args(ckpt, other_geometry), "64x32"},
        {"checkpoint", decode_args(kFixtures / "checkpoint_20", good), "differs"},
        {"width", decode_args(ckpt, good, "--width 64"), "workload.width = 64"},
        {"both", decode_args(ckpt, good, "--save-latents " + quoted(keep / "again.safetensors")), "--save-latents"},
    };
    for (const auto & c : cases) {
        const auto r = run_ddo_host("ltx2_bad_latents_" + c.tag, c.args);
        EXPECT_EQ(r.exit_code, 2) << c.tag << "\n" << r.log;
        EXPECT_NE(r.log.find(c.names), std::string::npos) << c.tag << ": names " << c.names << "\n" << r.log;
        if (c.tag != "text" && c.tag != "embeds" && c.tag != "both") {
            EXPECT_NE(r.log.find("--decode-latents"), std::string::npos) << c.tag << "\n" << r.log;
        }
        ASSERT_TRUE(r.report.is_object()) << c.tag;
        EXPECT_EQ(r.report.at("status"), "failed") << c.tag;
        EXPECT_TRUE(r.report.at("outputs").empty()) << c.tag;
    }
    const auto r = run_ddo_host("ltx2_bad_latents_plugin", "--plugin ltx2_image --save-latents " + quoted(keep / "x.safetensors"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("does not write or decode latents files"), std::string::npos) << r.log;
    fs::remove_all(keep);
}
