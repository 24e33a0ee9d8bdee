// ddo-host --cache on a two-stage ltx2_video run (issue 41; Note [Step caching], "Two-stage runs"), against diffusers'
// own hooks on the two-stage composition (tools/reference/ltx2_two_stage_cache_fixtures.py: stage 1 at half size, 20
// steps with CFG + STG + modality isolation, the tiny x2 latent upsampler, stage 2 on the 3 distilled stage-2 sigmas;
// each stage its own cache of the same settings with fresh state). Per case: the per-step pattern of every cache
// context in each stage (TaylorSeer: per context and hooked module) equals the hook's, stage 2 runs uncached below
// cache.min_steps (recorded in step_cache.stages[] and as an adjustment of cache.kind) and cached with
// cache.allow_few_steps, and the stage-2 latents equal the reference's within 1e-4 (ltx2_video's fp32 tolerance). On
// the disk route the engine's skipped bytes equal the stages' bytes not streamed.
#include <gtest/gtest.h>

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

const fs::path kDir = LTX2_TWO_STAGE_CACHE_FIXTURE_DIR;

json reference() {
    std::ifstream in(kDir / "reference.json");
    return json::parse(in);
}

json contexts() { return reference().at("cache_contexts"); }

// The fixture's stage-1 settings as ddo-host flags at the final size (ltx2_video runs stage 1 at half of it); the
// stage-2 grid and guidance are the plugin's defaults (STAGE_2_DISTILLED_SIGMA_VALUES, guidance 1.0).
std::string base_args() {
    const auto r = reference();
    const auto & s = r.at("stage1");
    return "--plugin ltx2 --model " + quoted(kDir / "checkpoint") + " --prompt-embeds " +
           quoted(kDir / "prompt_embeds.safetensors") + " --width " + std::to_string(2 * s.at("width").get<int>()) +
           " --height " + std::to_string(2 * s.at("height").get<int>()) + " --frames " +
           std::to_string(s.at("num_frames").get<int>()) + " --fps " + json(s.at("frame_rate")).dump() + " --steps " +
           std::to_string(s.at("steps").get<int>()) + " --cfg-scale " + json(s.at("guidance_scale")).dump() +
           " --set 'plugin.ltx2_video.stg_blocks=" + s.at("spatio_temporal_guidance_blocks").dump() + "'" +
           " --set plugin.ltx2_video.audio_guidance_scale=" + json(s.at("audio_guidance_scale")).dump() +
           " --set plugin.ltx2_video.upsampler=" + quoted(kDir / "checkpoint" / "latent_upsampler");
}

// Per phase and branch, "C"/"R" per pass (steps[].extra.cache).
std::map<std::string, std::map<std::string, std::string>> pattern_of(const json & report) {
    std::map<std::string, std::map<std::string, std::string>> out;
    for (const auto & s : report.at("steps")) {
        if (!s.contains("extra") || !s.at("extra").contains("cache")) continue;
        for (const auto & r : s.at("extra").at("cache"))
            out[s.at("phase").get<std::string>()][r.at("branch").get<std::string>()] +=
                r.at("computed").get<bool>() ? 'C' : 'R';
    }
    return out;
}

struct Result {
    ddo::test::HostRun run;
    double video_error = 0, audio_error = 0;
};

Result run_case(const std::string & name, const std::string & cache, const std::string & extra = "") {
    const fs::path latents =
        fs::temp_directory_path() / ("ddo_ltx2_ts_cache_" + name + "_" + std::to_string(::getpid()) + ".safetensors");
    fs::remove(latents);
    Result out;
    out.run = ddo::test::run_ddo_host("ltx2_two_stage_cache_" + name,
                                      base_args() + cache + extra + " --save-latents " + quoted(latents));
    if (out.run.exit_code != 0) return out;
    const auto got = ddo::model::TensorFile::open_file(latents);
    const auto want = ddo::model::TensorFile::open_file(kDir / "pipeline.safetensors");
    out.video_error = (got.read("video_latents")[0].to(at::kDouble) - want.read(name + ".latents").to(at::kDouble))
                          .abs().max().item<double>();
    out.audio_error = (got.read("audio_latents")[0].to(at::kDouble) -
                       want.read(name + ".audio_latents").to(at::kDouble)).abs().max().item<double>();
    fs::remove(latents);
    return out;
}

std::string threshold_of(const json & stage) { return json(stage.at("params").at("threshold")).dump(); }

// The patterns of both stages equal the reference's (a stage it ran without a cache: no records in that phase), and
// the stage-2 latents are within tolerance.
void expect_equal_to_reference(const std::string & name, const Result & r) {
    ASSERT_EQ(r.run.exit_code, 0) << r.run.log;
    const auto ref = reference().at("runs").at(name);
    const auto pattern = pattern_of(r.run.report);
    for (const auto & [stage, phase] : {std::pair{"stage1", "denoise"}, {"stage2", "denoise_stage2"}}) {
        const auto & want = ref.at(stage);
        if (!want.contains("pattern_string")) {
            if (want.at("kind") == "none") {
                EXPECT_EQ(pattern.count(phase), 0u) << name << " " << phase;
            }
            continue;
        }
        ASSERT_TRUE(pattern.count(phase)) << name << ": no cache records in " << phase;
        for (const auto & b : contexts()) {
            const auto branch = b.get<std::string>();
            EXPECT_EQ(pattern.at(phase).count(branch) ? pattern.at(phase).at(branch) : "(none)",
                      want.at("pattern_string").at(branch).get<std::string>())
                << name << " " << phase << " " << branch;
        }
    }
    EXPECT_LE(r.video_error, 1e-4) << name;
    EXPECT_LE(r.audio_error, 1e-4) << name;
    std::cout << "[ two-stage ] " << name << ": video latents max abs error " << r.video_error << ", audio "
              << r.audio_error << " (tolerance 1e-4)\n";
}

}  // namespace

// Stage 2's 3-step schedule is below cache.min_steps (10): stage 1 cached as the hook caches it, stage 2 without the
// cache, and the report says so (stages[], the adjustment of cache.kind).
TEST(Ltx2TwoStageCache, FirstBlockCachesStageOneAndSaysWhyStageTwoRunsWithout) {
    const auto ref = reference().at("runs").at("fbc");
    const auto r = run_case("fbc", " --cache first_block --set cache.threshold=" + threshold_of(ref.at("stage1")));
    expect_equal_to_reference("fbc", r);
    ASSERT_EQ(r.run.exit_code, 0);
    const auto & sc = r.run.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "first_block");
    EXPECT_EQ(sc.at("passes").get<int>(), 60) << "the top-level summary is stage 1's";
    ASSERT_EQ(sc.at("stages").size(), 2u) << sc.dump();
    EXPECT_EQ(sc.at("stages")[0].at("phase"), "denoise");
    EXPECT_TRUE(sc.at("stages")[0].at("cached").get<bool>());
    EXPECT_EQ(sc.at("stages")[1].at("phase"), "denoise_stage2");
    EXPECT_EQ(sc.at("stages")[1].at("steps").get<int>(), 3);
    EXPECT_FALSE(sc.at("stages")[1].at("cached").get<bool>());
    EXPECT_NE(sc.at("stages")[1].at("reason").get<std::string>().find("cache.min_steps"), std::string::npos);
    bool adjusted = false;
    for (const auto & a : r.run.report.at("adjustments"))
        if (a.at("key") == "cache.kind") {
            adjusted = true;
            EXPECT_EQ(a.at("effective").at("denoise"), "first_block") << a.dump();
            EXPECT_EQ(a.at("effective").at("denoise_stage2"), "off") << a.dump();
        }
    EXPECT_TRUE(adjusted) << r.run.report.at("adjustments").dump();
}

// cache.allow_few_steps: stage 2 has a cache of its own (fresh state, its 3 steps), on the disk route: what both stages
// skip is not streamed.
TEST(Ltx2TwoStageCache, FirstBlockOnBothStagesWithAllowFewStepsSkipsTheirBlocks) {
    const auto ref = reference().at("runs").at("fbc_all");
    const auto r = run_case("fbc_all", " --cache first_block --set cache.threshold=" + threshold_of(ref.at("stage1")) +
                                           " --set cache.allow_few_steps=true",
                            " --set components.transformer.route=disk");
    expect_equal_to_reference("fbc_all", r);
    ASSERT_EQ(r.run.exit_code, 0);
    const auto & sc = r.run.report.at("step_cache");
    ASSERT_EQ(sc.at("stages").size(), 2u) << sc.dump();
    uint64_t not_streamed = 0;
    for (const auto & st : sc.at("stages")) {
        EXPECT_TRUE(st.at("cached").get<bool>()) << st.dump();
        not_streamed += st.at("summary").at("bytes_not_streamed").get<uint64_t>();
    }
    EXPECT_GT(sc.at("stages")[1].at("summary").at("bytes_not_streamed").get<uint64_t>(), 0u) << "stage 2 reused nothing";
    const auto & c = r.run.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), not_streamed) << c.dump();
}

TEST(Ltx2TwoStageCache, ImageToVideoFirstBlockOnBothStagesEqualsTheHooks) {
    const auto ref = reference().at("runs").at("i2v_fbc_all");
    expect_equal_to_reference("i2v_fbc_all",
                              run_case("i2v_fbc_all",
                                       " --cache first_block --set cache.threshold=" + threshold_of(ref.at("stage1")) +
                                           " --set cache.allow_few_steps=true",
                                       " --image " + quoted(kDir / "still.png") + " --set plugin.ltx2_video.image_crf=0"));
}

// MagCache on both stages: stage 2's ratios are the given ones interpolated to its 3 steps, as MagCacheConfig does
// for num_inference_steps = 3.
TEST(Ltx2TwoStageCache, MagOnBothStagesInterpolatesItsRatiosPerStage) {
    const auto p = reference().at("runs").at("mag_all").at("stage1").at("params");  // a value: reference() is one
    expect_equal_to_reference(
        "mag_all", run_case("mag_all", " --cache mag --set cache.threshold=" + json(p.at("threshold")).dump() +
                                           " --set cache.max_skip_steps=" + json(p.at("max_skip_steps")).dump() +
                                           " --set cache.retention_ratio=" + json(p.at("retention_ratio")).dump() +
                                           " --set 'cache.mag_ratios=" + p.at("mag_ratios").dump() + "'" +
                                           " --set cache.allow_few_steps=true"));
}

TEST(Ltx2TwoStageCache, SeaOnBothStagesEqualsTheHooks) {
    const auto ref = reference().at("runs").at("sea_all");
    expect_equal_to_reference("sea_all", run_case("sea_all", " --cache sea --set cache.threshold=" +
                                                                 threshold_of(ref.at("stage1")) +
                                                                 " --set cache.allow_few_steps=true"));
}

// TaylorSeer on stage 1 (stage 2 below cache.min_steps): per context and hooked module, the computed/predicted
// schedule equals the hook's.
TEST(Ltx2TwoStageCache, TaylorSeerStageOneEqualsTheHookModuleForModule) {
    const auto ref = reference().at("runs").at("ts").at("stage1");
    const auto & p = ref.at("params");
    const auto r = run_case("ts", " --cache taylorseer --set cache.max_order=" + p.at("max_order").dump() +
                                      " --set cache.taylor_factors_dtype=fp32 --set cache.cache_interval=" +
                                      p.at("cache_interval").dump() + " --set cache.disable_cache_before_step=" +
                                      p.at("disable_cache_before_step").dump() +
                                      " --set cache.disable_cache_after_step=" + p.at("disable_cache_after_step").dump() +
                                      " --set 'cache.cache_identifiers=" + p.at("cache_identifiers").dump() + "'");
    expect_equal_to_reference("ts", r);
    ASSERT_EQ(r.run.exit_code, 0);
    const auto order = r.run.report.at("step_cache").at("hooked_modules").get<std::vector<std::string>>();
    std::map<std::string, std::map<std::string, std::string>> got;
    for (const auto & s : r.run.report.at("steps")) {
        if (!s.contains("extra") || !s.at("extra").contains("cache")) continue;
        EXPECT_EQ(s.at("phase"), "denoise");
        for (const auto & rec : s.at("extra").at("cache")) {
            const auto m = rec.at("modules").get<std::string>();
            for (size_t k = 0; k < m.size() && k < order.size(); ++k)
                if (m[k] != '-') got[rec.at("branch").get<std::string>()][order[k]] += m[k];
        }
    }
    for (const auto & b : contexts()) {
        const auto branch = b.get<std::string>();
        for (const auto & [module, mp] : ref.at("module_pattern").at(branch).items())
            EXPECT_EQ(got[branch].count(module) ? got[branch][module] : "(never called)", mp.get<std::string>())
                << branch << " " << module;
    }
}
