// ddo-host --cache on ltx2_image (issue 41, Note [Step caching]), on the step-cache parity fixtures
// (tools/reference/ltx2_image_cache_fixtures.py: 20 steps, CFG 3, diffusers' hooks, one cache context "cond_uncond"
// for the guidance batch): the per-step pattern of the whole CLI path equals the hook's, the report carries every pass
// (steps[].extra.cache) and the summary (step_cache), the engine skips what the cache skips on the disk route, a
// MagCache calibration writes mag_ratios.toml that a preset run takes, TaylorSeer lite mode predicts what the hook
// predicts module for module and streams no block of a predicted step, SeaCache reuses what the hook reuses and streams
// no block of a reused pass, and the refused settings exit 2 naming the key
// with the report written (taylorseer with diffusers' default patterns, which match no module of this model, too).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using nlohmann::json;

namespace {

const fs::path kDir = LTX2_IMAGE_CACHE_FIXTURE_DIR;
const char * kBranch = "cond_uncond";

json reference() {
    std::ifstream in(kDir / "reference.json");
    return json::parse(in);
}

std::string base_args(int steps = 20) {
    const auto r = reference();
    const auto & s = r.at("runs").at("off").at("settings");
    return "--plugin ltx2_image --model " + quoted(kDir / "checkpoint") + " --prompt-embeds " +
           quoted(kDir / "prompt_embeds.safetensors") + " --seed " + std::to_string(r.at("seed").get<int>()) +
           " --steps " + std::to_string(steps) + " --width " + std::to_string(r.at("width").get<int>()) +
           " --height " + std::to_string(r.at("height").get<int>()) + " --cfg-scale " +
           json(s.at("guidance_scale")).dump() + " --set plugin.ltx2_image.guidance_rescale=" +
           json(s.at("guidance_rescale")).dump() + " --set plugin.ltx2_image.pag_scale=0";
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

// TaylorSeer: module -> "C"/"P" per call, from steps[].extra.cache[].modules (one character per module of
// step_cache.hooked_modules, "-" where not called).
std::map<std::string, std::string> module_pattern_of(const json & report) {
    const auto order = report.at("step_cache").at("hooked_modules").get<std::vector<std::string>>();
    std::map<std::string, std::string> out;
    for (const auto & s : report.at("steps")) {
        if (!s.at("extra").contains("cache")) continue;
        for (const auto & r : s.at("extra").at("cache")) {
            if (!r.contains("modules")) continue;
            const auto m = r.at("modules").get<std::string>();
            for (size_t k = 0; k < m.size() && k < order.size(); ++k)
                if (m[k] != '-') out[order[k]] += m[k];
        }
    }
    return out;
}

void expect_refused(const std::string & tag, const std::string & args, const std::string & key) {
    const auto r = ddo::test::run_ddo_host("ltx2_image_cache_bad_" + tag, args);
    EXPECT_EQ(r.exit_code, 2) << tag << "\n" << r.log;
    EXPECT_NE(r.log.find(key), std::string::npos) << tag << ": the error does not name " << key << "\n" << r.log;
    ASSERT_TRUE(r.report.is_object()) << tag << ": no report was written\n" << r.log;
    EXPECT_EQ(r.report.value("exit_code", json()).dump(), "2") << tag << " " << r.report.value("status", json()).dump();
}

}  // namespace

TEST(Ltx2ImageCache, FirstBlockThroughTheHostReusesWhatTheHookReusesAndSkipsTheStreaming) {
    const auto ref = reference().at("runs").at("fbc_hi");
    const auto r = ddo::test::run_ddo_host(
        "ltx2_image_cache_fbc", base_args() + " --cache first_block --set cache.threshold=" +
                                    json(ref.at("params").at("threshold")).dump() +
                                    " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    ASSERT_EQ(pattern.size(), 1u) << "one branch: the guidance batch is one forward";
    EXPECT_EQ(pattern.at(kBranch), ref.at("pattern_string").at(kBranch).get<std::string>());
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "first_block");
    EXPECT_EQ(sc.at("passes").get<int>(), 20);
    EXPECT_TRUE(sc.at("fired").get<bool>());
    EXPECT_LT(sc.at("computed_block_fraction").get<double>(), 1.0);
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    const auto off = ddo::test::run_ddo_host("ltx2_image_cache_off", base_args() + " --set components.transformer.route=disk");
    ASSERT_EQ(off.exit_code, 0) << off.log;
    EXPECT_TRUE(off.report.at("step_cache").is_null());
    const auto & c_off = off.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_LT(c.at("bytes_moved").at("file").get<uint64_t>(), c_off.at("bytes_moved").at("file").get<uint64_t>())
        << c.dump() << "\n" << c_off.dump();
    std::cout << "[ disk      ] cache " << c.at("bytes_moved").dump() << " vs off " << c_off.at("bytes_moved").dump()
              << "; computed fraction " << sc.at("computed_block_fraction") << "\n";
}

TEST(Ltx2ImageCache, MagCalibrationWritesRatiosThatAPresetRunTakes) {
    const auto ref = reference().at("runs");
    std::string toml;
    const auto cal = ddo::test::run_ddo_host("ltx2_image_cache_calibrate",
                                             base_args() + " --cache mag --set cache.calibrate=true",
                                             [&](const fs::path & dir) {
                                                 std::ifstream in(dir / "mag_ratios.toml");
                                                 toml.assign(std::istreambuf_iterator<char>(in), {});
                                             });
    ASSERT_EQ(cal.exit_code, 0) << cal.log;
    ASSERT_FALSE(toml.empty()) << "no mag_ratios.toml";
    EXPECT_EQ(pattern_of(cal.report).at(kBranch), std::string(20, 'C'));
    const auto ours = cal.report.at("step_cache").at("calibration").at(kBranch).get<std::vector<double>>();
    const auto theirs = ref.at("mag_calibrate").at("calibration").at(kBranch).get<std::vector<double>>();
    ASSERT_EQ(ours.size(), theirs.size());
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], theirs[i], 1e-5 * std::abs(theirs[i])) << i;
    const fs::path preset = fs::temp_directory_path() / ("ddo_ltx2_cache_preset_" + std::to_string(::getpid()) + ".toml");
    std::ofstream(preset) << toml;
    const auto mag = ref.at("mag_hi");
    const auto run = ddo::test::run_ddo_host("ltx2_image_cache_mag",
                                             base_args() + " --preset " + quoted(preset) + " --set cache.threshold=" +
                                                 json(mag.at("params").at("threshold")).dump());
    fs::remove(preset);
    ASSERT_EQ(run.exit_code, 0) << run.log;
    EXPECT_EQ(pattern_of(run.report).at(kBranch), mag.at("pattern_string").at(kBranch).get<std::string>());
    EXPECT_EQ(run.report.at("step_cache").at("kind"), "mag");
}

// Img2img runs the same loop on the strength's kept steps: the cache runs on those (20 steps at strength 0.6 keep 12,
// above cache.min_steps), one pass per kept step, and reuses some. No hook fixture covers img2img (the reference's
// loop is the same; Note [Step caching], LTX-2): this checks the plumbing, not the numbers.
TEST(Ltx2ImageCache, Img2ImgRunsTheCacheOnTheKeptSteps) {
    const auto ref = reference().at("runs").at("fbc_hi");
    const auto r = ddo::test::run_ddo_host(
        "ltx2_image_cache_img2img", base_args() + " --image " + quoted(fs::path(LTX2_IMAGE_IMG2IMG_FIXTURE_DIR) / "input.png") +
                                        " --strength 0.6 --cache first_block --set cache.threshold=" +
                                        json(ref.at("params").at("threshold")).dump());
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("steps").get<int>(), 12) << sc.dump();
    EXPECT_EQ(sc.at("passes").get<int>(), 12) << sc.dump();
    EXPECT_EQ(pattern_of(r.report).at(kBranch).size(), 12u);
    std::cout << "[ img2img   ] " << pattern_of(r.report).at(kBranch) << "\n";
}

TEST(Ltx2ImageCache, RefusedSettingsExitTwoNamingTheKeyWithTheReportWritten) {
    // The plugin's default 8 steps (the distilled schedule) are below cache.min_steps.
    expect_refused("few_steps", base_args(8) + " --cache first_block", "cache.min_steps");
    expect_refused("mag_without_ratios", base_args() + " --cache mag", "cache.mag_ratios");
    expect_refused("unknown_kind", base_args() + " --cache teacache", "cache.kind");
    // diffusers' default patterns (^transformer_blocks.*attn) match no module of the image DiT (attn1, attn2 end in a
    // digit; the fixture's ts_defaults: nothing hooked): a taylorseer that would change nothing is refused.
    ASSERT_TRUE(reference().at("runs").at("ts_defaults").at("hooked_modules").empty());
    expect_refused("taylorseer_defaults", base_args() + " --cache taylorseer", "cache.cache_identifiers");
    const auto allowed = ddo::test::run_ddo_host("ltx2_image_cache_few_allowed",
                                                 base_args(8) + " --cache first_block --set cache.allow_few_steps=true");
    EXPECT_EQ(allowed.exit_code, 0) << allowed.log;
}

// TaylorSeer lite mode through the host on the disk route: the hooked modules (every block, proj_out) and each one's
// schedule equal the hook's (ts_lite), and a predicted step streams no block.
TEST(Ltx2ImageCache, TaylorSeerLiteThroughTheHostPredictsWhatTheHookPredictsAndStreamsNoBlock) {
    const auto ref = reference().at("runs").at("ts_lite");
    const auto r = ddo::test::run_ddo_host("ltx2_image_cache_ts_lite",
                                           base_args() + " --cache taylorseer --set cache.use_lite_mode=true" +
                                               " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "taylorseer");
    auto hooked = sc.at("hooked_modules").get<std::vector<std::string>>();
    auto ref_hooked = ref.at("hooked_modules").get<std::vector<std::string>>();
    std::sort(hooked.begin(), hooked.end());
    std::sort(ref_hooked.begin(), ref_hooked.end());
    EXPECT_EQ(hooked, ref_hooked);
    const auto pattern = module_pattern_of(r.report);
    const auto & want = ref.at("module_pattern").at(kBranch);
    EXPECT_EQ(pattern.size(), want.size());
    for (const auto & [module, mp] : want.items()) {
        const auto it = pattern.find(module);
        EXPECT_EQ(it == pattern.end() ? "(never called)" : it->second, mp.get<std::string>()) << module;
    }
    EXPECT_NE(pattern_of(r.report).at(kBranch).find('R'), std::string::npos) << "no pass predicted";
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    std::cout << "[ ts_lite   ] proj_out " << pattern.at("proj_out") << "; computed fraction "
              << sc.at("computed_block_fraction") << ", " << c.at("bytes_skipped") << " bytes not streamed\n";
}

// SeaCache through the host on the disk route (the fixture's sea_o0: residual order 0, no limit on reuses in a row, two
// retained and two end steps, every sea key through --set): the pattern equals the hook's, and a reused pass streams
// none of the stack's blocks.
TEST(Ltx2ImageCache, SeaThroughTheHostReusesWhatTheHookReusesAndSkipsTheStack) {
    const auto ref = reference().at("runs").at("sea_o0");
    const auto & p = ref.at("params");
    ASSERT_EQ(p.at("residual_order").get<int>(), 0);
    const auto r = ddo::test::run_ddo_host(
        "ltx2_image_cache_sea", base_args() + " --cache sea --set cache.threshold=" + json(p.at("threshold")).dump() +
                                    " --set cache.residual_order=0 --set cache.max_consecutive_cached=" +
                                    json(p.at("max_consecutive_cached")).dump() + " --set cache.retention_steps=" +
                                    json(p.at("retention_steps")).dump() + " --set cache.cache_end_steps=" +
                                    json(p.at("cache_end_steps")).dump() + " --set cache.power_exp=3" +
                                    " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    ASSERT_EQ(pattern.size(), 1u) << "one branch: the guidance batch is one forward";
    EXPECT_EQ(pattern.at(kBranch), ref.at("pattern_string").at(kBranch).get<std::string>());
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "sea");
    EXPECT_EQ(sc.at("residual_order").get<int>(), 0);
    const auto reused = std::count(pattern.at(kBranch).begin(), pattern.at(kBranch).end(), 'R');
    EXPECT_GT(reused, 0);
    const auto layers = reference().at("num_layers").get<int64_t>();
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_EQ(c.at("skipped_groups").get<int64_t>(), reused * layers) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    std::cout << "[ sea       ] " << pattern.at(kBranch) << "; " << c.at("bytes_skipped") << " bytes not streamed\n";
}
