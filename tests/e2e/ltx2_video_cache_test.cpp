// ddo-host --cache on ltx2_video (issue 41, Note [Step caching]), on the step-cache parity fixtures
// (tools/reference/ltx2_video_cache_fixtures.py: LTX2Pipeline with diffusers' hooks, 20 steps, CFG + STG + modality
// isolation, contexts "cond_uncond", "uncond_stg", "uncond_modality"): the per-step pattern of every context through
// the whole CLI path equals the hook's, the engine skips what the cache skips on the disk route, image-to-video equals
// the hooks on LTX2ImageToVideoPipeline (pattern and latents; TaylorSeer: the hooked modules and each one's schedule
// per context; SeaCache, whose indicator includes the clean conditioned frame), and the settings the plugin does not implement with a cache (keyframe conditions) exit 2
// naming the key, the report written.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <ATen/ATen.h>

#include "ddo/model/tensor_file.hpp"
#include "e2e/host_run.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using nlohmann::json;

namespace {

const fs::path kDir = LTX2_VIDEO_CACHE_FIXTURE_DIR;

json reference() {
    std::ifstream in(kDir / "reference.json");
    return json::parse(in);
}

// The fixture's cache contexts, a value: a range-for over reference().at("cache_contexts") would iterate a member of
// a temporary destroyed before the loop runs (C++20).
json contexts() { return reference().at("cache_contexts"); }

// The fixture's settings as ddo-host flags (the plugin's defaults are LTX2Pipeline's: STG 1, modality 3, rescale 0.7,
// audio STG 1 / modality 3 / rescale 0.7, use_cross_timestep).
std::string base_args(int steps = 0) {
    const auto r = reference();
    const auto & s = r.at("settings");
    return "--plugin ltx2 --model " + quoted(kDir / "checkpoint") + " --prompt-embeds " +
           quoted(kDir / "prompt_embeds.safetensors") + " --width " + std::to_string(s.at("width").get<int>()) +
           " --height " + std::to_string(s.at("height").get<int>()) + " --frames " +
           std::to_string(s.at("num_frames").get<int>()) + " --fps " + json(s.at("frame_rate")).dump() + " --steps " +
           std::to_string(steps ? steps : r.at("steps").get<int>()) + " --cfg-scale " + json(s.at("guidance_scale")).dump() +
           " --set 'plugin.ltx2_video.stg_blocks=" + s.at("spatio_temporal_guidance_blocks").dump() + "'" +
           " --set plugin.ltx2_video.audio_guidance_scale=" + json(s.at("audio_guidance_scale")).dump();
}

std::map<std::string, std::string> pattern_of(const json & report) {
    std::map<std::string, std::string> out;
    for (const auto & s : report.at("steps")) {
        if (!s.at("extra").contains("cache")) continue;
        for (const auto & r : s.at("extra").at("cache"))
            out[r.at("branch").get<std::string>()] += r.at("computed").get<bool>() ? 'C' : 'R';
    }
    return out;
}

// TaylorSeer: per branch, module -> "C"/"P" per call, from steps[].extra.cache[].modules (one character per module of
// step_cache.hooked_modules, "-" where not called).
std::map<std::string, std::map<std::string, std::string>> module_pattern_of(const json & report) {
    const auto order = report.at("step_cache").at("hooked_modules").get<std::vector<std::string>>();
    std::map<std::string, std::map<std::string, std::string>> out;
    for (const auto & s : report.at("steps")) {
        if (!s.at("extra").contains("cache")) continue;
        for (const auto & r : s.at("extra").at("cache")) {
            auto & per = out[r.at("branch").get<std::string>()];
            if (!r.contains("modules")) continue;
            const auto m = r.at("modules").get<std::string>();
            for (size_t k = 0; k < m.size() && k < order.size(); ++k)
                if (m[k] != '-') per[order[k]] += m[k];
        }
    }
    return out;
}

void expect_refused(const std::string & tag, const std::string & args, const std::string & key) {
    const auto r = ddo::test::run_ddo_host("ltx2_video_cache_bad_" + tag, args);
    EXPECT_EQ(r.exit_code, 2) << tag << "\n" << r.log;
    EXPECT_NE(r.log.find(key), std::string::npos) << tag << ": the error does not name " << key << "\n" << r.log;
    ASSERT_TRUE(r.report.is_object()) << tag << ": no report was written\n" << r.log;
    EXPECT_EQ(r.report.value("exit_code", json()).dump(), "2") << tag << " " << r.report.value("status", json()).dump();
}

}  // namespace

TEST(Ltx2VideoCache, FirstBlockThroughTheHostReusesWhatTheHookReusesInEveryContext) {
    const auto ref = reference().at("runs").at("fbc_hi");
    const auto r = ddo::test::run_ddo_host(
        "ltx2_video_cache_fbc", base_args() + " --cache first_block --set cache.threshold=" +
                                    json(ref.at("params").at("threshold")).dump() +
                                    " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    for (const auto & b : contexts())
        EXPECT_EQ(pattern.at(b.get<std::string>()), ref.at("pattern_string").at(b.get<std::string>()).get<std::string>())
            << b;
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "first_block");
    EXPECT_EQ(sc.at("passes").get<int>(), 60);
    EXPECT_TRUE(sc.at("fired").get<bool>());
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    std::cout << "[ disk      ] cache " << c.at("bytes_moved").dump() << "; computed fraction "
              << sc.at("computed_block_fraction") << "\n";
}

// Image-to-video (LTX2ImageToVideoPipeline: the still as latent frame 0, same cache contexts): the pattern of every
// context and the latents (--save-latents: de-normalised, as the pipeline's output_type="latent") equal the hooks'.
TEST(Ltx2VideoCache, ImageToVideoEqualsTheHooks) {
    for (const std::string name : {"i2v_fbc_hi", "i2v_mag_hi"}) {
        const auto ref = reference().at("runs").at(name);
        const auto & p = ref.at("params");
        std::string cache = " --cache first_block --set cache.threshold=" + json(p.at("threshold")).dump();
        if (ref.at("kind") == "mag_cache")
            cache = " --cache mag --set cache.threshold=" + json(p.at("threshold")).dump() + " --set 'cache.mag_ratios=" +
                    p.at("mag_ratios").dump() + "'";
        const fs::path latents = fs::temp_directory_path() / ("ddo_ltx2_cache_" + name + "_" + std::to_string(::getpid()) +
                                                              ".safetensors");
        fs::remove(latents);
        const auto r = ddo::test::run_ddo_host("ltx2_video_cache_" + name, base_args() + " --image " +
                                                   quoted(kDir / "still.png") + " --set plugin.ltx2_video.image_crf=0" + cache +
                                                   " --save-latents " +
                                                   quoted(latents));
        ASSERT_EQ(r.exit_code, 0) << r.log;
        const auto pattern = pattern_of(r.report);
        for (const auto & b : contexts())
            EXPECT_EQ(pattern.at(b.get<std::string>()), ref.at("pattern_string").at(b.get<std::string>()).get<std::string>())
                << name << " " << b;
        const auto got = ddo::model::TensorFile::open_file(latents);
        const auto want = ddo::model::TensorFile::open_file(kDir / "pipeline.safetensors");
        const double ev = (got.read("video_latents")[0].to(at::kDouble) - want.read(name + ".latents").to(at::kDouble))
                              .abs().max().item<double>();
        const double ea = (got.read("audio_latents")[0].to(at::kDouble) -
                           want.read(name + ".audio_latents").to(at::kDouble)).abs().max().item<double>();
        EXPECT_LE(ev, 1e-4) << name;
        EXPECT_LE(ea, 1e-4) << name;
        std::cout << "[ i2v       ] " << name << " " << pattern.at("cond_uncond") << ": video latents max abs error " << ev
                  << ", audio " << ea << " (tolerance 1e-4)\n";
        fs::remove(latents);
    }
}

// Two-stage runs take a cache (tests/e2e/ltx2_two_stage_cache_test.cpp); keyframe conditions do not yet.
TEST(Ltx2VideoCache, KeyframesAndFewStepsAreRefusedNamingTheKey) {
    expect_refused("keyframe", base_args() + " --cache first_block --image " + quoted(kDir / "keyframe.png") + "@3",
                   "workload.images");
    expect_refused("few_steps", base_args(8) + " --cache first_block", "cache.min_steps");
}

// TaylorSeer through the host on image-to-video (i2v_ts: max_order 2, fp32 factors, the self-attentions and
// feed-forwards of both streams hooked by pattern through --set): the hooked modules, each one's computed/predicted
// schedule in every context, and the latents equal diffusers' hook on LTX2ImageToVideoPipeline.
TEST(Ltx2VideoCache, TaylorSeerImageToVideoEqualsTheHookModuleForModule) {
    const std::string name = "i2v_ts";
    const auto ref = reference().at("runs").at(name);
    const auto & p = ref.at("params");
    const std::string cache = " --cache taylorseer --set cache.max_order=" + p.at("max_order").dump() +
                              " --set cache.taylor_factors_dtype=fp32 --set cache.cache_interval=" +
                              p.at("cache_interval").dump() + " --set cache.disable_cache_before_step=" +
                              p.at("disable_cache_before_step").dump() + " --set cache.disable_cache_after_step=" +
                              p.at("disable_cache_after_step").dump() + " --set 'cache.cache_identifiers=" +
                              p.at("cache_identifiers").dump() + "'";
    ASSERT_EQ(p.at("taylor_factors_dtype").get<std::string>(), "float32");
    const fs::path latents =
        fs::temp_directory_path() / ("ddo_ltx2_cache_" + name + "_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(latents);
    const auto r = ddo::test::run_ddo_host("ltx2_video_cache_" + name,
                                           base_args() + " --image " + quoted(kDir / "still.png") +
                                               " --set plugin.ltx2_video.image_crf=0" + cache + " --save-latents " +
                                               quoted(latents));
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "taylorseer");
    auto hooked = sc.at("hooked_modules").get<std::vector<std::string>>();
    auto ref_hooked = ref.at("hooked_modules").get<std::vector<std::string>>();
    std::sort(hooked.begin(), hooked.end());
    std::sort(ref_hooked.begin(), ref_hooked.end());
    EXPECT_EQ(hooked, ref_hooked);
    EXPECT_GT(sc.at("module_calls_predicted").get<uint64_t>(), 0u) << sc.dump();
    const auto pattern = module_pattern_of(r.report);
    for (const auto & b : contexts()) {
        const auto branch = b.get<std::string>();
        const auto & want = ref.at("module_pattern").at(branch);
        ASSERT_TRUE(pattern.count(branch)) << branch;
        EXPECT_EQ(pattern.at(branch).size(), want.size()) << branch;
        for (const auto & [module, mp] : want.items()) {
            const auto it = pattern.at(branch).find(module);
            EXPECT_EQ(it == pattern.at(branch).end() ? "(never called)" : it->second, mp.get<std::string>())
                << branch << " " << module;
        }
    }
    const auto got = ddo::model::TensorFile::open_file(latents);
    const auto want = ddo::model::TensorFile::open_file(kDir / "pipeline.safetensors");
    const double ev = (got.read("video_latents")[0].to(at::kDouble) - want.read(name + ".latents").to(at::kDouble))
                          .abs().max().item<double>();
    const double ea = (got.read("audio_latents")[0].to(at::kDouble) - want.read(name + ".audio_latents").to(at::kDouble))
                          .abs().max().item<double>();
    EXPECT_LE(ev, 1e-4);
    EXPECT_LE(ea, 1e-4);
    std::cout << "[ i2v       ] " << name << " cond_uncond transformer_blocks.1.attn1 "
              << pattern.at("cond_uncond").at("transformer_blocks.1.attn1") << ": video latents max abs error " << ev
              << ", audio " << ea << " (tolerance 1e-4)\n";
    fs::remove(latents);
}

// SeaCache through the host on image-to-video (i2v_sea: residual order 0, no limit on reuses in a row, two retained and
// two end steps, every sea key through --set; the indicator is the latents with the clean frame 0), on the disk route:
// the pattern of every context and the latents equal diffusers' hook on LTX2ImageToVideoPipeline, and a reused pass
// streams none of the stack's blocks.
TEST(Ltx2VideoCache, SeaImageToVideoEqualsTheHookAndSkipsTheStack) {
    const std::string name = "i2v_sea";
    const auto ref = reference().at("runs").at(name);
    const auto & p = ref.at("params");
    ASSERT_EQ(p.at("residual_order").get<int>(), 0);
    const std::string cache = " --cache sea --set cache.threshold=" + json(p.at("threshold")).dump() +
                              " --set cache.residual_order=0 --set cache.max_consecutive_cached=" +
                              json(p.at("max_consecutive_cached")).dump() + " --set cache.retention_steps=" +
                              json(p.at("retention_steps")).dump() + " --set cache.cache_end_steps=" +
                              json(p.at("cache_end_steps")).dump() + " --set cache.power_exp=3";
    const fs::path latents =
        fs::temp_directory_path() / ("ddo_ltx2_cache_" + name + "_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(latents);
    const auto r = ddo::test::run_ddo_host("ltx2_video_cache_" + name,
                                           base_args() + " --image " + quoted(kDir / "still.png") +
                                               " --set plugin.ltx2_video.image_crf=0" + cache +
                                               " --set components.transformer.route=disk --save-latents " +
                                               quoted(latents));
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    int64_t reused = 0;
    for (const auto & b : contexts()) {
        const auto branch = b.get<std::string>();
        ASSERT_TRUE(pattern.count(branch)) << branch;
        EXPECT_EQ(pattern.at(branch), ref.at("pattern_string").at(branch).get<std::string>()) << branch;
        reused += std::count(pattern.at(branch).begin(), pattern.at(branch).end(), 'R');
    }
    EXPECT_GT(reused, 0);
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "sea");
    EXPECT_EQ(sc.at("residual_order").get<int>(), 0);
    const auto layers = reference().at("num_layers").get<int64_t>();
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_EQ(c.at("skipped_groups").get<int64_t>(), reused * layers) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    const auto got = ddo::model::TensorFile::open_file(latents);
    const auto want = ddo::model::TensorFile::open_file(kDir / "pipeline.safetensors");
    const double ev = (got.read("video_latents")[0].to(at::kDouble) - want.read(name + ".latents").to(at::kDouble))
                          .abs().max().item<double>();
    const double ea = (got.read("audio_latents")[0].to(at::kDouble) - want.read(name + ".audio_latents").to(at::kDouble))
                          .abs().max().item<double>();
    EXPECT_LE(ev, 1e-4);
    EXPECT_LE(ea, 1e-4);
    std::cout << "[ i2v       ] " << name << " " << pattern.at("cond_uncond") << ": video latents max abs error " << ev
              << ", audio " << ea << " (tolerance 1e-4)\n";
    fs::remove(latents);
}
