// ddo-host --cache on qwen_image_21 (issue 41, Note [Step caching]), on the step-cache parity fixtures
// (tools/reference/qwen_image_21_cache_fixtures.py: 20 steps, CFG, diffusers' hooks): the per-step pattern of the
// whole CLI path equals the hook's, the report carries every pass (steps[].extra.cache) and the summary (step_cache), the
// engine skips what the cache skips on the disk route, a MagCache calibration writes mag_ratios.toml that a preset
// run takes, and every refused setting exits 2 naming the key with the report written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kDir = QI21C_FIXTURE_DIR;

json reference() {
    std::ifstream in(kDir / "reference.json");
    return json::parse(in);
}

std::string base_args(int steps = 20) {
    const auto r = reference();
    return "--plugin qwen_image --model '" + (kDir / "checkpoint").string() + "' --prompt-embeds '" +
           (kDir / "prompt_embeds.safetensors").string() + "' --steps " + std::to_string(steps) + " --width " +
           std::to_string(r.at("width").get<int>()) + " --height " + std::to_string(r.at("height").get<int>()) +
           " --cfg-scale " + std::to_string(r.at("true_cfg_scale").get<double>()) +
           " --set plugin.qwen_image_21.use_kv_cache=false --set workload.precision=\"fp32\"";
}

// "C"/"R" per step and branch from the report's steps[].cache records.
std::map<std::string, std::string> pattern_of(const json & report) {
    std::map<std::string, std::string> out;
    for (const auto & s : report.at("steps")) {
        if (!s.at("extra").contains("cache")) continue;
        for (const auto & r : s.at("extra").at("cache")) out[r.at("branch").get<std::string>()] += r.at("computed").get<bool>() ? 'C' : 'R';
    }
    return out;
}

void expect_refused(const std::string & tag, const std::string & args, const std::string & key) {
    const auto r = ddo::test::run_ddo_host("cache_bad_" + tag, base_args() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << tag << "\n" << r.log;
    EXPECT_NE(r.log.find(key), std::string::npos) << tag << ": the error does not name " << key << "\n" << r.log;
    ASSERT_TRUE(r.report.is_object()) << tag << ": no report was written\n" << r.log;
    EXPECT_EQ(r.report.value("exit_code", json()).dump(), "2") << tag << " " << r.report.value("status", json()).dump();
}

}  // namespace

TEST(Qi21Cache, FirstBlockThroughTheHostReusesWhatTheHookReusesAndSkipsTheStreaming) {
    const auto ref = reference().at("runs").at("fbc_hi");
    const auto r = ddo::test::run_ddo_host(
        "cache_fbc", base_args() + " --cache first_block --set cache.threshold=" +
                         std::to_string(ref.at("params").at("threshold").get<double>()) +
                         " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    EXPECT_EQ(pattern.at("cond"), ref.at("pattern_string").at("cond").get<std::string>());
    EXPECT_EQ(pattern.at("uncond"), ref.at("pattern_string").at("uncond").get<std::string>());
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "first_block");
    EXPECT_EQ(sc.at("passes").get<int>(), 40);
    EXPECT_TRUE(sc.at("fired").get<bool>());
    EXPECT_LT(sc.at("computed_block_fraction").get<double>(), 1.0);
    EXPECT_EQ(sc.at("source").at("cache.kind").get<std::string>().rfind("--set", 0), 0u) << sc.at("source").dump();
    // The disk route streams every block it runs: what the cache skipped, the engine did not read.
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    const auto off = ddo::test::run_ddo_host("cache_off", base_args() + " --set components.transformer.route=disk");
    ASSERT_EQ(off.exit_code, 0) << off.log;
    EXPECT_TRUE(off.report.at("step_cache").is_null());
    const auto & c_off = off.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_LT(c.at("bytes_moved").at("file").get<uint64_t>(), c_off.at("bytes_moved").at("file").get<uint64_t>())
        << c.dump() << "\n" << c_off.dump();
    std::cout << "[ disk      ] cache " << c.at("bytes_moved").dump() << " vs off " << c_off.at("bytes_moved").dump()
              << "; computed fraction " << sc.at("computed_block_fraction") << "\n";
}

// With the prefix KV cache on (the plugin's default; diffusers' hooks fail there, so no reference exists) the cache
// works on the rows each pass computes (Note [Step caching]): both kinds run, reuse passes, and skip streaming.
TEST(Qi21Cache, BothKindsRunWithThePrefixKvCache) {
    const auto r = reference();
    std::string args = base_args();
    const std::string kv_off = " --set plugin.qwen_image_21.use_kv_cache=false";
    args.replace(args.find(kv_off), kv_off.size(), "");
    ASSERT_EQ(args.find("use_kv_cache"), std::string::npos) << args;
    const auto fbc = ddo::test::run_ddo_host("cache_kv_fbc", args + " --cache first_block --set cache.threshold=0.865 "
                                                                    "--set components.transformer.route=disk");
    ASSERT_EQ(fbc.exit_code, 0) << fbc.log;
    EXPECT_TRUE(fbc.report.at("workload").value("kv_cache_used", false)) << fbc.report.at("workload").dump();
    EXPECT_TRUE(fbc.report.at("step_cache").at("fired").get<bool>()) << fbc.report.at("step_cache").dump();
    EXPECT_GT(fbc.report.at("step_cache").at("bytes_not_streamed").get<uint64_t>(), 0u);
    const auto mag = ddo::test::run_ddo_host(
        "cache_kv_mag", args + " --cache mag --set 'cache.mag_ratios=" +
                            r.at("runs").at("mag_hi").at("params").at("mag_ratios").dump() + "' --set cache.threshold=1.0");
    ASSERT_EQ(mag.exit_code, 0) << mag.log;
    EXPECT_TRUE(mag.report.at("step_cache").at("fired").get<bool>()) << mag.report.at("step_cache").dump();
}

TEST(Qi21Cache, MagCalibrationWritesRatiosThatAPresetRunTakes) {
    const auto ref = reference().at("runs");
    std::string toml;
    const auto cal = ddo::test::run_ddo_host("cache_calibrate", base_args() + " --cache mag --set cache.calibrate=true",
                                             [&](const fs::path & dir) {
                                                 std::ifstream in(dir / "mag_ratios.toml");
                                                 toml.assign(std::istreambuf_iterator<char>(in), {});
                                             });
    ASSERT_EQ(cal.exit_code, 0) << cal.log;
    ASSERT_FALSE(toml.empty()) << "no mag_ratios.toml";
    EXPECT_EQ(pattern_of(cal.report).at("cond"), std::string(20, 'C'));
    const auto ours = cal.report.at("step_cache").at("calibration").at("cond").get<std::vector<double>>();
    const auto theirs = ref.at("mag_calibrate").at("calibration").at("cond").get<std::vector<double>>();
    ASSERT_EQ(ours.size(), theirs.size());
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], theirs[i], 1e-5 * std::abs(theirs[i])) << i;
    bool listed = false;
    for (const auto & o : cal.report.at("outputs")) listed = listed || o.dump().find("mag_ratios.toml") != std::string::npos;
    EXPECT_TRUE(listed) << cal.report.at("outputs").dump();
    // The file is a preset: a run on it reuses what diffusers' MagCache reuses with the reference's ratios.
    const fs::path preset = fs::temp_directory_path() / ("ddo_cache_preset_" + std::to_string(::getpid()) + ".toml");
    std::ofstream(preset) << toml;
    const auto mag = ref.at("mag_hi");
    const auto run = ddo::test::run_ddo_host(
        "cache_mag", base_args() + " --preset '" + preset.string() + "' --set cache.threshold=" +
                         std::to_string(mag.at("params").at("threshold").get<double>()));
    fs::remove(preset);
    ASSERT_EQ(run.exit_code, 0) << run.log;
    EXPECT_EQ(pattern_of(run.report).at("cond"), mag.at("pattern_string").at("cond").get<std::string>());
    EXPECT_EQ(pattern_of(run.report).at("uncond"), mag.at("pattern_string").at("uncond").get<std::string>());
    EXPECT_EQ(run.report.at("step_cache").at("kind"), "mag");
}

TEST(Qi21Cache, MaxSkipStepsAndRetentionRatioChangeThePattern) {
    const auto mag = reference().at("runs").at("mag_hi");
    const std::string args = base_args() + " --cache mag --set 'cache.mag_ratios=" +
                             mag.at("params").at("mag_ratios").dump() + "' --set cache.threshold=" +
                             std::to_string(mag.at("params").at("threshold").get<double>());
    const auto base = ddo::test::run_ddo_host("cache_mag_base", args);
    const auto one = ddo::test::run_ddo_host("cache_mag_one", args + " --set cache.max_skip_steps=1");
    const auto late = ddo::test::run_ddo_host("cache_mag_late", args + " --set cache.retention_ratio=0.5");
    ASSERT_EQ(base.exit_code, 0) << base.log;
    ASSERT_EQ(one.exit_code, 0) << one.log;
    ASSERT_EQ(late.exit_code, 0) << late.log;
    const auto p = pattern_of(base.report).at("cond");
    EXPECT_EQ(p, mag.at("pattern_string").at("cond").get<std::string>());
    EXPECT_NE(p.find("RR"), std::string::npos) << p;
    const auto p1 = pattern_of(one.report).at("cond");
    EXPECT_EQ(p1.find("RR"), std::string::npos) << "max_skip_steps = 1 reused two steps in a row: " << p1;
    EXPECT_NE(p1.find('R'), std::string::npos) << p1;
    const auto pl = pattern_of(late.report).at("cond");
    EXPECT_EQ(pl.substr(0, 10), std::string(10, 'C')) << "retention_ratio 0.5 of 20 steps keeps the first 10: " << pl;
    EXPECT_NE(pl, p);
}

TEST(Qi21Cache, EveryRefusedSettingExitsTwoNamingTheKeyWithTheReportWritten) {
    expect_refused("unknown_kind", "--cache teacache", "cache.kind");
    expect_refused("nan_threshold", "--cache first_block --set cache.threshold=nan", "cache.threshold");
    expect_refused("negative_threshold", "--cache first_block --set cache.threshold=-0.1", "cache.threshold");
    expect_refused("mag_without_ratios", "--cache mag", "cache.mag_ratios");
    expect_refused("other_kinds_key", "--cache first_block --set cache.max_skip_steps=2", "cache.max_skip_steps");
    expect_refused("key_without_kind", "--set cache.threshold=0.1", "cache.threshold");
    expect_refused("min_steps", "--cache first_block --set cache.min_steps=25", "cache.min_steps");
    // taylorseer with the prefix KV cache (base_args turns it off): step 1 (target rows only) cannot be predicted from
    // step 0 (prefix + target); it was a LibTorch shape error (exit 4) before it was refused.
    const auto ts = ddo::test::run_ddo_host("cache_bad_ts_prefix", "--plugin qwen_image --model '" +
                                                                        (kDir / "checkpoint").string() + "' --prompt-embeds '" +
                                                                        (kDir / "prompt_embeds.safetensors").string() +
                                                                        "' --steps 12 --width 64 --height 64 --cache taylorseer "
                                                                        "--set cache.disable_cache_before_step=1");
    EXPECT_EQ(ts.exit_code, 2) << ts.log;
    EXPECT_NE(ts.log.find("cache.disable_cache_before_step = 1 with the prefix KV cache"), std::string::npos) << ts.log;
    const auto few = ddo::test::run_ddo_host("cache_few_steps", base_args(8) + " --cache first_block");
    EXPECT_EQ(few.exit_code, 2) << few.log;
    EXPECT_NE(few.log.find("cache.min_steps"), std::string::npos) << few.log;
    const auto allowed =
        ddo::test::run_ddo_host("cache_few_allowed", base_args(8) + " --cache first_block --set cache.allow_few_steps=true");
    EXPECT_EQ(allowed.exit_code, 0) << allowed.log;
}

// TaylorSeer through the host: the module schedule per branch equals the hook's (ts_lite, ts_nested of the fixture),
// the report names the hooked modules and records each pass's; lite mode on the disk route skips every block of a
// predicted step, counted by the engine.
TEST(Qi21Cache, TaylorSeerThroughTheHostPredictsWhatTheHookPredictsAndLiteSkipsTheStreaming) {
    const auto ref = reference().at("runs").at("ts_lite");
    const auto r = ddo::test::run_ddo_host("cache_ts_lite", base_args() + " --cache taylorseer --set cache.use_lite_mode=true"
                                                             " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "taylorseer");
    EXPECT_TRUE(sc.at("use_lite_mode").get<bool>());
    const auto order = sc.at("hooked_modules").get<std::vector<std::string>>();
    std::map<std::string, std::map<std::string, std::string>> got;
    for (const auto & s : r.report.at("steps"))
        for (const auto & rec : s.at("extra").at("cache")) {
            const auto m = rec.at("modules").get<std::string>();
            for (size_t k = 0; k < m.size(); ++k) got[rec.at("branch").get<std::string>()][order.at(k)] += m[k];
        }
    for (const auto & branch : {"cond", "uncond"})
        for (const auto & [module, p] : ref.at("module_pattern").at(branch).items())
            EXPECT_EQ(got[branch][module], p.get<std::string>()) << branch << " " << module;
    EXPECT_EQ(sc.at("reused_passes").get<int>(), 26);  // 13 predicted steps x 2 branches
    EXPECT_GT(sc.at("memory").at("peak_bytes").get<uint64_t>(), 0u);
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), 26u * 4u) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();

    // Identifiers from a preset, nested (a hooked attn inside a hooked block) and a skip_predict module.
    const auto nested = reference().at("runs").at("ts_nested");
    const fs::path preset = fs::path(::testing::TempDir()) / "ts_nested.toml";
    std::ofstream(preset) << "schema_version = 1\ndescription = \"ts_nested of the fixture\"\n[cache]\nkind = "
                             "\"taylorseer\"\ncache_interval = 4\ndisable_cache_before_step = 2\ntaylor_factors_dtype = "
                             "\"fp16\"\ncache_identifiers = ['transformer_blocks\\.1(\\.attn)?', 'proj_out']\n"
                             "skip_predict_identifiers = ['transformer_blocks\\.2\\.img_mlp']\n";
    const auto n = ddo::test::run_ddo_host("cache_ts_nested", base_args() + " --preset '" + preset.string() + "'");
    ASSERT_EQ(n.exit_code, 0) << n.log;
    const auto norder = n.report.at("step_cache").at("hooked_modules").get<std::vector<std::string>>();
    std::map<std::string, std::string> cond;
    for (const auto & s : n.report.at("steps"))
        for (const auto & rec : s.at("extra").at("cache"))
            if (rec.at("branch") == "cond") {
                const auto m = rec.at("modules").get<std::string>();
                for (size_t k = 0; k < m.size(); ++k)
                    if (m[k] != '-') cond[norder.at(k)] += m[k];
            }
    for (const auto & [module, p] : nested.at("module_pattern").at("cond").items())
        EXPECT_EQ(cond[module], p.get<std::string>()) << module;
}

TEST(Qi21Cache, TaylorSeerRefusesWhatItCannotHonourWithTheReportWritten) {
    expect_refused("ts_unhookable", "--cache taylorseer --set cache.cache_identifiers='transformer_blocks\\.0\\..*'",
                   "cache.cache_identifiers");
    expect_refused("ts_matches_nothing", "--cache taylorseer --set cache.cache_identifiers='single_blocks\\..*'",
                   "cache.cache_identifiers");
    expect_refused("ts_step0", "--cache taylorseer --set cache.disable_cache_before_step=0",
                   "cache.disable_cache_before_step");
    expect_refused("ts_lite_and_ids",
                   "--cache taylorseer --set cache.use_lite_mode=true --set cache.cache_identifiers='proj_out'",
                   "cache.use_lite_mode");
    expect_refused("ts_foreign_key", "--cache taylorseer --set cache.threshold=0.1", "cache.threshold");
}

// SeaCache through the host: the pattern of each branch equals the hook's (the fixture's sea_o0: residual order 0, no
// limit on reuses in a row, two retained and two end steps), and the engine skips the whole stack of a reused pass.
TEST(Qi21Cache, SeaThroughTheHostReusesWhatTheHookReusesAndSkipsTheStack) {
    const auto ref = reference().at("runs").at("sea_o0");
    const auto & p = ref.at("params");
    const auto r = ddo::test::run_ddo_host(
        "cache_sea", base_args() + " --cache sea --set cache.threshold=" + std::to_string(p.at("threshold").get<double>()) +
                         " --set cache.residual_order=0 --set cache.max_consecutive_cached=0 --set "
                         "cache.retention_steps=2 --set cache.cache_end_steps=2 --set cache.power_exp=3"
                         " --set components.transformer.route=disk");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto pattern = pattern_of(r.report);
    EXPECT_EQ(pattern.at("cond"), ref.at("pattern_string").at("cond").get<std::string>());
    EXPECT_EQ(pattern.at("uncond"), ref.at("pattern_string").at("uncond").get<std::string>());
    const auto & sc = r.report.at("step_cache");
    EXPECT_EQ(sc.at("kind"), "sea");
    EXPECT_EQ(sc.at("residual_order").get<int>(), 0);
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    const auto reused = std::count(pattern.at("cond").begin(), pattern.at("cond").end(), 'R') +
                        std::count(pattern.at("uncond").begin(), pattern.at("uncond").end(), 'R');
    EXPECT_EQ(c.at("skipped_groups").get<int64_t>(), reused * 4) << c.dump();
    EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), sc.at("bytes_not_streamed").get<uint64_t>()) << sc.dump();
    // The filter's prior changes the gate's signal (cache.power_exp): the same run at 1.5 compares other distances.
    const auto flat = ddo::test::run_ddo_host(
        "cache_sea_flat", base_args() + " --cache sea --set cache.threshold=" + std::to_string(p.at("threshold").get<double>()) +
                              " --set cache.residual_order=0 --set cache.max_consecutive_cached=0 --set "
                              "cache.retention_steps=2 --set cache.cache_end_steps=2 --set cache.power_exp=1.5");
    ASSERT_EQ(flat.exit_code, 0) << flat.log;
    auto signals = [](const json & report) {
        std::vector<double> v;
        for (const auto & s : report.at("steps"))
            for (const auto & rec : s.at("extra").at("cache"))
                if (rec.contains("distance")) v.push_back(rec.at("distance").get<double>());
        return v;
    };
    ASSERT_FALSE(signals(flat.report).empty());
    ASSERT_FALSE(signals(r.report).empty());
    // Both first compare at step 2 (two retained steps), on the same latents: only the filter differs.
    EXPECT_NE(signals(flat.report).front(), signals(r.report).front());
    expect_refused("sea_order", "--cache sea --set cache.residual_order=2", "cache.residual_order");
    expect_refused("sea_power", "--cache sea --set cache.power_exp=0", "cache.power_exp");
    expect_refused("sea_foreign_key", "--cache sea --set cache.max_order=2", "cache.max_order");
}
