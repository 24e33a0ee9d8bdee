// Every setting is honoured or refused (issue "honest runs"): for every key of the preset schema and every
// qwen_image_21 option, a run with the value changed differs from the same run without the change in what the
// report says, in the image's pixels, or by a refusal (exit 2). Keys whose effect needs a setup of its own point to
// the test that shows it; the test checks those tests exist. It prints the keys without a test (the list must be
// empty). ddo-host on a 4-block tiny Qwen-Image 2.1 checkpoint made by the reference harness.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "ddo/preset/preset_schema.hpp"
#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct KeyRun : ddo::test::HostRun {
    std::vector<uint8_t> pixels;
};

const fs::path & model_dir() {
    static const fs::path dir = [] {
        const fs::path d = fs::temp_directory_path() / ("ddo_key_effects_" + std::to_string(::getpid()));
        fs::remove_all(d);
        const std::string cmd = std::string("'") + DDO_PYTHON + "' '" + DDO_SOURCE_DIR +
                                "/tools/reference/qwen_image_21_fixtures.py' --num-layers 4 '" + d.string() + "' > /dev/null";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
        return d;
    }();
    return dir;
}

// The workload as --set (not --steps/--width shorthands, which the host appends after every --set and so would win
// over a case's own --set workload.*). Runs are memoised: cases share their baselines.
KeyRun run(const std::string & args, bool dry) {
    static std::map<std::pair<std::string, bool>, KeyRun> memo;
    if (auto it = memo.find({args, dry}); it != memo.end()) return it->second;
    KeyRun r;
    static int n = 0;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "keys_" + std::to_string(n++),
        "--plugin qwen_image --model '" + (model_dir() / "checkpoint").string() + "' --prompt-embeds '" +
            (model_dir() / "prompt_embeds.safetensors").string() +
            "' --set workload.steps=2 --set workload.width=64 --set workload.height=64 " + args +
            (dry ? " --dry-run" : ""),
        [&](const fs::path & dir) {
            if (fs::exists(dir / "image.png")) r.pixels = ddo::test::read_png(dir / "image.png").pixels;
        });
    memo.emplace(std::make_pair(args, dry), r);
    return r;
}

const json & at(const json & j, const std::string & dotted) {
    static const json null_json;
    const json * cur = &j;
    std::size_t start = 0;
    while (start <= dotted.size()) {
        const auto dot = dotted.find('.', start);
        const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (!cur->is_object() || !cur->contains(part)) return null_json;
        cur = &cur->at(part);
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return *cur;
}

std::vector<std::string> residencies(const KeyRun & r) {
    std::vector<std::string> out;
    for (const auto & g : at(r.report, "counters.transformer.engine.plan.groups")) out.push_back(g.at("residency"));
    return out;
}

// A key's evidence: base and changed arguments (dry run or a real one) and what must differ; or a test elsewhere.
struct Effect {
    using Check = std::function<void(const KeyRun & base, const KeyRun & changed)>;
    Effect() = default;
    // The table's rows name base, changed, dry and check; shown_by is set on its own (-Wmissing-field-initializers).
    Effect(std::string b, std::string c, bool d = true, Check ch = {})
        : base(std::move(b)), changed(std::move(c)), dry(d), check(std::move(ch)) {}
    std::string base, changed;
    bool dry = true;
    Check check;
    std::string shown_by;  // "Suite.Name" of a test that shows it (instead of base/changed)
};

void expect_refused(const KeyRun & b, const KeyRun & c, const std::string & names) {
    EXPECT_EQ(b.exit_code, 0) << b.log;
    EXPECT_EQ(c.exit_code, 2) << c.log;
    EXPECT_NE(c.log.find(names), std::string::npos) << c.log;
}

auto differs(const std::string & path) {
    return [path](const KeyRun & b, const KeyRun & c) {
        EXPECT_EQ(b.exit_code, 0) << b.log;
        EXPECT_EQ(c.exit_code, 0) << c.log;
        EXPECT_FALSE(at(b.report, path).is_null()) << path << " missing\n" << b.report.dump().substr(0, 2000);
        EXPECT_NE(at(b.report, path), at(c.report, path)) << path << " did not change: " << at(b.report, path).dump();
    };
}

auto pixels_differ() {
    return [](const KeyRun & b, const KeyRun & c) {
        ASSERT_EQ(b.exit_code, 0) << b.log;
        ASSERT_EQ(c.exit_code, 0) << c.log;
        ASSERT_FALSE(b.pixels.empty());
        EXPECT_NE(b.pixels, c.pixels) << "the image did not change";
        EXPECT_TRUE(std::any_of(b.pixels.begin(), b.pixels.end(), [](uint8_t v) { return v != 0; })) << "an all-zero image";
    };
}

const std::string kStream = " --preset low_ram_safe --set components.transformer.resident_budget_gb=0.00007";
const std::string kPinned = " --preset one_shot_fast --set components.transformer.resident_budget_gb=0.00007";
const std::string kDisk = " --preset low_ram_safe --set components.transformer.route=disk";
const std::string kTiled = " --preset low_ram_safe --set workload.width=128 --set workload.height=128 --set vae.strategy=tiled "
                           "--set vae.tile_size=64 --set vae.tile_overlap=32";

std::map<std::string, Effect> effects() {
    std::map<std::string, Effect> e;
    // Preset metadata: shown by the resolver's tests.
    e["schema_version"].shown_by = "PresetTest.ErrorMissingSchemaVersion";
    e["description"].shown_by = "PresetTest.ShippedPresetsResolveWithDescriptions";
    e["inherits"].shown_by = "PresetTest.ChildBeatsParentAndKeepsParentProvenance";
    for (const char * k : {"auto.linux", "auto.wsl", "auto.other"}) e[k].shown_by = "PresetTest.AutoResolvesByInjectedPlatform";

    e["capacities.device_budget_gb"] = {kStream, kStream + " --set capacities.device_budget_gb=0.00001", true,
                                        [](const KeyRun & b, const KeyRun & c) { expect_refused(b, c, "device capacity"); }};
    e["capacities.resident_budget_gb"] = {" --preset low_ram_safe", " --preset low_ram_safe --set capacities.resident_budget_gb=0.00007",
                                          true, differs("counters.transformer.engine.plan.resident_bytes")};
    e["capacities.pinned_host_budget_gb"] = {kPinned, kPinned + " --set capacities.pinned_host_budget_gb=0.00001", true,
                                             differs("counters.transformer.engine.plan.pinned_bytes")};
    e["capacities.pin_host_memory"] = {kPinned, kPinned + " --set capacities.pin_host_memory=false", true,
                                       differs("counters.transformer.engine.host_staging.limits.pinned_route")};
    // A headroom above the machine's RAM leaves the forecast no host memory (Note [Memory forecast]): refused before
    // anything loads, naming the key in the budget's source.
    e["capacities.ram_headroom_gb"] = {kPinned, kPinned + " --set capacities.ram_headroom_gb=60000", true,
                                       [](const KeyRun & b, const KeyRun & c) {
                                           expect_refused(b, c, "minus capacities.ram_headroom_gb");
                                       }};
    e["capacities.staging_slots"] = {kDisk, kDisk + " --set capacities.staging_slots=3", true,
                                     differs("counters.transformer.engine.plan.staging_slots")};
    e["capacities.prefetch_depth"] = {kStream, kStream + " --set capacities.prefetch_depth=0", true,
                                      differs("counters.transformer.engine.plan.prefetch_depth")};
    e["capacities.host_registration"] = {kPinned, kPinned + " --set capacities.host_registration=off", true,
                                         differs("counters.transformer.engine.host_staging.limits.registration")};
    e["capacities.host_registration_ceiling_gb"] = {
        kPinned + " --set capacities.host_registration=bounded --set capacities.host_registration_ceiling_gb=1",
        kPinned + " --set capacities.host_registration=bounded --set capacities.host_registration_ceiling_gb=2", true,
        differs("counters.transformer.engine.host_staging.limits.registration_ceiling")};
    e["capacities.allocator"] = {kStream, kStream + " --set capacities.allocator=vmm", true,
                                 differs("counters.transformer.placement.allocator.used")};
    e["capacities.allocator_backend"] = {kStream, kStream + " --set capacities.allocator_backend=host", true,
                                         differs("counters.transformer.placement.allocator_backend.reason")};
    e["planner.selection"] = {kStream + " --set planner.selection=first", kStream + " --set planner.selection=spread", true,
                              [](const KeyRun & b, const KeyRun & c) { EXPECT_NE(residencies(b), residencies(c)); }};
    e["runtime.generation_repeats"].shown_by = "Qi21Settings.GenerationRepeatsRepeatWithTheirOwnPhases";
    e["vae.strategy"] = {" --preset low_ram_safe", " --preset low_ram_safe --set vae.strategy=resident", false,
                         differs("routes.vae.intended")};
    e["vae.tile_size"] = {kTiled, kTiled + " --set vae.tile_size=96", false, pixels_differ()};
    e["vae.tile_overlap"] = {kTiled, kTiled + " --set vae.tile_overlap=16", false, pixels_differ()};
    e["vae.temporal_frames"] = {kStream, kStream + " --set vae.temporal_frames=8", true,
                                [](const KeyRun & b, const KeyRun & c) { expect_refused(b, c, "vae.temporal_frames"); }};
    e["components.*.route"] = {kStream, kStream + " --set components.transformer.route=disk", true,
                               differs("routes.transformer.executed")};
    e["components.*.use_stream"].shown_by = "Qi21Settings.UseStreamFalseMakesGroupUploadsSynchronous";
    e["components.*.blocks_per_group"].shown_by = "Qi21Settings.BlocksPerGroupMergesGroupsOrIsRefused";
    e["components.*.resident_budget_gb"] = {" --preset low_ram_safe", kStream, true,
                                            differs("counters.transformer.engine.plan.resident_bytes")};
    e["components.*.staging_slots"] = {kDisk, kDisk + " --set components.transformer.staging_slots=3", true,
                                       differs("counters.transformer.engine.plan.staging_slots")};
    e["components.*.prefetch_depth"] = {kStream, kStream + " --set components.transformer.prefetch_depth=0", true,
                                        differs("counters.transformer.engine.plan.prefetch_depth")};
    e["components.*.selection"] = {kStream + " --set components.transformer.selection=first",
                                   kStream + " --set components.transformer.selection=spread", true,
                                   [](const KeyRun & b, const KeyRun & c) { EXPECT_NE(residencies(b), residencies(c)); }};
    e["workload.steps"] = {kStream, kStream + " --set workload.steps=3", false,
                           [](const KeyRun & b, const KeyRun & c) { EXPECT_NE(b.report.at("steps").size(), c.report.at("steps").size()); }};
    e["workload.width"] = {kStream, kStream + " --set workload.width=96", false, pixels_differ()};
    e["workload.height"] = {kStream, kStream + " --set workload.height=96", false, pixels_differ()};
    e["workload.frames"] = {kStream, kStream + " --set workload.frames=9", true,
                            [](const KeyRun & b, const KeyRun & c) { expect_refused(b, c, "workload.frames"); }};
    e["workload.fps"] = {kStream, kStream + " --set workload.fps=24", true,
                         [](const KeyRun & b, const KeyRun & c) { expect_refused(b, c, "workload.fps"); }};
    e["workload.seed"] = {kStream, kStream + " --set workload.seed=1", false, pixels_differ()};
    e["workload.num_images"] = {kStream, kStream + " --set workload.num_images=2", false, [](const KeyRun & b, const KeyRun & c) {
                                    EXPECT_EQ(b.report.at("outputs").size(), 1u);
                                    EXPECT_EQ(c.report.at("outputs").size(), 2u);
                                }};
    e["workload.precision"] = {kStream, kStream + " --set workload.precision=bf16", true, differs("workload.dtype")};
    e["workload.prompt"].shown_by = "Qi21Text.FromTextEqualsDiffusersOnResidentAndStreamedTextEncoderRoutes";
    e["workload.negative_prompt"].shown_by = "Qi21Text.FromTextEqualsDiffusersOnResidentAndStreamedTextEncoderRoutes";
    e["telemetry.sample_interval_ms"] = {kStream, kStream + " --set telemetry.sample_interval_ms=250", true,
                                         differs("sampler.interval_ms")};
    e["telemetry.cpu_budget_percent"] = {kStream, kStream + " --set telemetry.cpu_budget_percent=0.5", true,
                                         differs("sampler.cpu_budget_fraction")};
    e["workload.sigmas"].shown_by = "Qi21Text.SampleSigmasOfTheCheckpointAndWorkloadSigmasGiveDiffusersImage";
    e["workload.guidance_scale"] = {kStream, kStream + " --set workload.guidance_scale=3", false, pixels_differ()};
    e["lora.adapters"].shown_by = "Qi21Lora.EveryKeyFamilyEqualsDiffusersLoadLoraWeights";
    e["lora.apply"].shown_by = "Qi21Lora.MergedIntoResidentWeightsEqualsRuntime";
    e["lora.allow_unmatched"].shown_by = "Qi21Lora.ALoraForAnotherModelIsRefusedBeforeAnythingIsComputed";
    e["workload.images"].shown_by = "Qi21Ref.EveryReferenceRunEqualsTheDiffusersPipeline";
    e["workload.strength"].shown_by = "Qi21Cli.ConditionImagesNeedATextPromptAndStrengthIsRefused";
    // Step caching (issue 41): each key against diffusers' hooks or refused, in tests/e2e/qwen_image_21_cache_test.cpp.
    e["cache.kind"].shown_by = "Qi21Cache.FirstBlockThroughTheHostReusesWhatTheHookReusesAndSkipsTheStreaming";
    e["cache.threshold"].shown_by = "Qi21Cache.MagCalibrationWritesRatiosThatAPresetRunTakes";
    e["cache.max_skip_steps"].shown_by = "Qi21Cache.MaxSkipStepsAndRetentionRatioChangeThePattern";
    e["cache.retention_ratio"].shown_by = "Qi21Cache.MaxSkipStepsAndRetentionRatioChangeThePattern";
    e["cache.mag_ratios"].shown_by = "Qi21Cache.MagCalibrationWritesRatiosThatAPresetRunTakes";
    e["cache.calibrate"].shown_by = "Qi21Cache.MagCalibrationWritesRatiosThatAPresetRunTakes";
    e["cache.min_steps"].shown_by = "Qi21Cache.EveryRefusedSettingExitsTwoNamingTheKeyWithTheReportWritten";
    e["cache.allow_few_steps"].shown_by = "Qi21Cache.EveryRefusedSettingExitsTwoNamingTheKeyWithTheReportWritten";
    // taylorseer: through the host (the fixture's ts_lite / ts_nested schedules) and, for max_order and
    // disable_cache_after_step, the fixture's ts_o2 against the hook in the parity test.
    for (const char * k : {"cache.cache_interval", "cache.disable_cache_before_step", "cache.taylor_factors_dtype",
                           "cache.cache_identifiers", "cache.skip_predict_identifiers", "cache.use_lite_mode"})
        e[k].shown_by = "Qi21Cache.TaylorSeerThroughTheHostPredictsWhatTheHookPredictsAndLiteSkipsTheStreaming";
    for (const char * k : {"cache.residual_order", "cache.retention_steps", "cache.cache_end_steps",
                           "cache.max_consecutive_cached", "cache.power_exp"})
        e[k].shown_by = "Qi21Cache.SeaThroughTheHostReusesWhatTheHookReusesAndSkipsTheStack";
    for (const char * k : {"cache.max_order", "cache.disable_cache_after_step"})
        e[k].shown_by = "Qi21CacheParity.EveryTaylorSeerRunEqualsDiffusersHookWithTheSameModuleSchedule";
    // Fitting a run to its memory (issue 42, Note [Fitting a run]).
    e["fit.policy"].shown_by = "Forecast.FitAutoAppliesTheCheapestSettingThatFitsAndRunsUnderTheBudget";
    // The plugin's own option.
    e["plugin.qwen_image_21.use_kv_cache"] = {kStream, kStream + " --set plugin.qwen_image_21.use_kv_cache=false", true,
                                              differs("workload.kv_cache_used")};
    e["plugin.qwen_image_21.output_resolution"].shown_by = "Qi21Ref.EveryReferenceRunEqualsTheDiffusersPipeline";
    // The CPU computes in host memory: a host-placed cache is refused there (CUDA: tests/cuda).
    e["plugin.qwen_image_21.kv_cache_placement"] = {
        kStream, kStream + " --set plugin.qwen_image_21.kv_cache_placement=host", true,
        [](const KeyRun & b, const KeyRun & c) { expect_refused(b, c, "kv_cache_placement"); }};
    return e;
}

// "Suite.Name" is a test defined somewhere under tests/ (TEST or TEST_F).
bool test_exists(const std::string & dotted) {
    const auto dot = dotted.find('.');
    const std::regex def("TEST(_F|_P)?\\(\\s*" + dotted.substr(0, dot) + ",\\s*" + dotted.substr(dot + 1) + "\\)");
    for (const auto & f : fs::recursive_directory_iterator(fs::path(DDO_SOURCE_DIR) / "tests")) {
        if (f.path().extension() != ".cpp") continue;
        std::ifstream in(f.path());
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        if (std::regex_search(text, def)) return true;
    }
    return false;
}

}  // namespace

TEST(Qi21KeyEffects, EveryKeyChangesTheRunOrIsRefused) {
    const auto table = effects();
    std::vector<std::string> untested;
    std::set<std::string> schema;
    for (const auto & k : ddo::preset_schema()) schema.insert(k.key);
    for (const char * k : {"plugin.qwen_image_21.use_kv_cache", "plugin.qwen_image_21.output_resolution",
                           "plugin.qwen_image_21.kv_cache_placement"})
        schema.insert(k);  // qwen_image_21's supported options
    for (const auto & key : schema) {
        const auto it = table.find(key);
        if (it == table.end()) {
            untested.push_back(key);
            continue;
        }
        const Effect & e = it->second;
        if (!e.shown_by.empty()) {
            EXPECT_TRUE(test_exists(e.shown_by)) << key << ": the test " << e.shown_by << " named as its evidence does not exist";
            std::cout << "[ key       ] " << key << ": shown by " << e.shown_by << "\n";
            continue;
        }
        SCOPED_TRACE(key);
        const KeyRun b = run(e.base, e.dry), c = run(e.changed, e.dry);
        e.check(b, c);
        std::cout << "[ key       ] " << key << ": changed -> " << (c.exit_code == 2 ? "refused (exit 2)" : "different run") << "\n";
    }
    for (const auto & [key, e] : table)
        EXPECT_TRUE(schema.count(key)) << key << " is in the table but not a schema key (removed? renamed?)";
    std::string list;
    for (const auto & k : untested) list += "\n  " + k;
    std::cout << "[ key       ] keys without a test: " << (untested.empty() ? "none" : list) << "\n";
    EXPECT_TRUE(untested.empty()) << "keys without a test that shows their effect:" << list;
    fs::remove_all(model_dir());
}

// docs/presets.md's key table lists exactly the schema's keys (and the plugin-option row), so the docs cannot
// advertise a key the code no longer has, nor hide one it has. Each listed key's effect is shown above.
TEST(Qi21KeyEffects, PresetDocsListEverySchemaKeyAndNoOther) {
    std::ifstream in(fs::path(DDO_SOURCE_DIR) / "docs" / "presets.md");
    ASSERT_TRUE(in) << "docs/presets.md";
    std::set<std::string> documented;
    const std::regex row(R"(^\| `([^|]+)` \|)");
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, row)) continue;
        // "`a` / `b`" rows name several keys; <c> stands for a component, <name>.<option> for plugin options.
        const std::string cell = m[1].str();
        const std::regex key("`?([a-z_]+(\\.(<c>|<name>|<option>|[a-z_0-9]+))*)`?");
        for (auto it = std::sregex_iterator(cell.begin(), cell.end(), key); it != std::sregex_iterator(); ++it) {
            std::string k = (*it)[1].str();
            k = std::regex_replace(k, std::regex("<c>"), "*");
            if (k.find('.') == std::string::npos && k != "schema_version" && k != "description" && k != "inherits") continue;
            documented.insert(k);
        }
    }
    std::set<std::string> schema;
    for (const auto & k : ddo::preset_schema()) schema.insert(k.key);
    for (const auto & k : schema) EXPECT_TRUE(documented.count(k)) << k << " is a schema key but docs/presets.md does not list it";
    for (const auto & k : documented) {
        if (k.starts_with("plugin.")) continue;  // the plugin-option row
        EXPECT_TRUE(schema.count(k)) << k << " is listed in docs/presets.md but is no schema key";
    }
    EXPECT_GT(documented.size(), 30u);
}
