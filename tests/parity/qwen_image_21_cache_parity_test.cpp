// qwen_image_21 with a step cache (issue 41, Note [Step caching]) against diffusers 0.42.1's own hooks
// (tools/reference/qwen_image_21_cache_fixtures.py: FirstBlockCache at two thresholds, MagCache calibrating and at two
// thresholds, TaylorSeerCache in five configurations, SeaCache at two thresholds and with order 0, on the tiny pipeline with CFG, 20 steps, the 2.1 block
// registered in diffusers' TransformerBlockRegistry as the single-stream block it is). TaylorSeer: per branch and
// hooked module, the computed/predicted schedule identical, the latents equal. Per run: the latents within 1e-4 of the reference's (the dense ladder's
// tolerance, fp32), and the per-step, per-branch computed/reused pattern identical (the fixture keeps every threshold
// 1e-3 relative away from the values it is compared with). Every engine route gives latents bitwise equal to the
// resident blocks' with the cache on, and the blocks the cache skips are neither acquired nor streamed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "block_source.hpp"
#include "cpu_plan.hpp"
#include "ddo/model/step_cache.hpp"
#include "parity/parity_support.hpp"
#include "pipeline.hpp"
#include "qwen_image_21_run_options.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;
using ddo::model::StepCache;
using ddo::model::StepCacheKind;
using ddo::model::StepCacheSettings;
using ddo::test::expect_close;

namespace {

const fs::path kDir = QI21C_FIXTURE_DIR;

class Qi21CacheParity : public ddo::test::ParitySuite {
protected:
    Qi21CacheParity() : ParitySuite(kDir, "qwen_image_21_cache_fixtures") {}
    const nlohmann::json & reference() const { return ddo::test::reference_of(kDir, "qwen_image_21_cache_fixtures"); }

    qi::PipelineOptions options() const {
        nlohmann::json r = reference();
        return ddo::test::qwen_image_21_run_options(r);
    }
};

// The fixture's run parameters (diffusers' names) as cache.* settings.
StepCacheSettings settings_of(const nlohmann::json & run) {
    StepCacheSettings s;
    const auto kind = run.at("kind").get<std::string>();
    const auto & p = run.at("params");
    s.min_steps = 1;
    if (kind == "taylorseer_cache") {
        s.kind = StepCacheKind::taylorseer;
        s.cache_interval = p.value("cache_interval", 5);
        s.disable_cache_before_step = p.value("disable_cache_before_step", 3);
        if (p.contains("disable_cache_after_step")) s.disable_cache_after_step = p.at("disable_cache_after_step").get<int>();
        s.max_order = p.value("max_order", 1);
        const auto dt = p.value("taylor_factors_dtype", std::string("bfloat16"));
        s.taylor_factors_dtype = dt == "float32" ? "fp32" : dt == "float16" ? "fp16" : "bf16";
        if (p.contains("cache_identifiers")) s.cache_identifiers = p.at("cache_identifiers").get<std::vector<std::string>>();
        if (p.contains("skip_predict_identifiers"))
            s.skip_predict_identifiers = p.at("skip_predict_identifiers").get<std::vector<std::string>>();
        s.use_lite_mode = p.value("use_lite_mode", false);
    } else if (kind == "sea_cache") {
        s.kind = StepCacheKind::sea;
        s.threshold = p.at("threshold").get<double>();
        s.residual_order = p.value("residual_order", 1);
        s.retention_steps = p.value("retention_steps", 1);
        s.cache_end_steps = p.value("cache_end_steps", 1);
        s.max_consecutive_cached = p.value("max_consecutive_cached", 2);
        s.power_exp = p.value("power_exp", 3.0);
    } else if (kind == "first_block_cache") {
        s.kind = StepCacheKind::first_block;
        s.threshold = p.at("threshold").get<double>();
    } else {
        s.kind = StepCacheKind::mag;
        s.calibrate = p.value("calibrate", false);
        s.threshold = p.value("threshold", 0.06);
        s.max_skip_steps = p.value("max_skip_steps", 3);
        s.retention_ratio = p.value("retention_ratio", 0.2);
        if (p.contains("mag_ratios")) s.mag_ratios = p.at("mag_ratios").get<std::vector<double>>();
    }
    return s;
}

// "C"/"R" per step for each branch, from the cache's pass records.
std::map<std::string, std::string> pattern_of(const nlohmann::json & records, int steps) {
    std::map<std::string, std::string> out;
    for (const auto & r : records) {
        auto & s = out[r.at("branch").get<std::string>()];
        if (s.empty()) s.assign(size_t(steps), '?');
        s.at(size_t(r.at("step").get<int>())) = r.at("computed").get<bool>() ? 'C' : 'R';
    }
    return out;
}

// TaylorSeer: per branch, module -> "C"/"P" per call, from the cache's pass records (summary.hooked_modules order).
std::map<std::string, std::map<std::string, std::string>> module_pattern_of(const nlohmann::json & records,
                                                                            const std::vector<std::string> & order) {
    std::map<std::string, std::map<std::string, std::string>> out;
    for (const auto & r : records) {
        auto & per = out[r.at("branch").get<std::string>()];
        const auto modules = r.at("modules").get<std::string>();
        for (size_t k = 0; k < modules.size() && k < order.size(); ++k)
            if (modules[k] != '-') per[order[k]] += modules[k];
    }
    return out;
}

// A StepCache for `run` bound to the tiny transformer's modules (taylorseer needs it; others ignore it).
std::unique_ptr<StepCache> cache_for(const nlohmann::json & run, int steps, const qi::TransformerConfig & c) {
    auto cache = std::make_unique<StepCache>(settings_of(run), steps);
    cache->bind_modules(qi::hookable_module_names(c), qi::diffusers_module_names(c));
    return cache;
}

struct Tiny {
    qi::ModelFiles m = qi::ModelFiles::open(kDir / "checkpoint");
    qi::Transformer transformer{m.transformer_config,
                                qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
    qi::PromptEmbeds embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", m.transformer_config.context_in_dim);
};

}  // namespace

TEST_F(Qi21CacheParity, EveryCacheRunEqualsDiffusersHookWithTheSamePattern) {
    Tiny t;
    const auto want = qi::TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    ASSERT_GE(steps, 20);
    ASSERT_TRUE(reference().at("true_cfg_scale").get<double>() > 1.0);
    auto src = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
    const auto off = qi::denoise(t.m, t.transformer, *src, t.embeds, options());
    expect_close("off latents", off, want.read("off.latents"), 1e-4);
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        if (run.at("kind") == "none" || run.at("kind") == "taylorseer_cache") continue;
        ++runs;
        StepCache cache(settings_of(run), steps);
        auto o = options();
        o.step_cache = &cache;
        const auto got = qi::denoise(t.m, t.transformer, *src, t.embeds, o);
        expect_close(name + " latents", got, want.read(name + ".latents"), 1e-4);
        const auto records = cache.take_step_records();
        const auto pattern = pattern_of(records, steps);
        for (const auto & branch : {"cond", "uncond"}) {
            EXPECT_EQ(pattern.at(branch), run.at("pattern_string").at(branch).get<std::string>()) << name << " " << branch;
            std::cout << "[ pattern   ] " << name << " " << branch << " " << pattern.at(branch) << "\n";
        }
        // The signal the decision read, against the hook's own (fp32: the same reductions, 1e-5 relative).
        const std::string sig = !run.contains("signals")                                 ? ""
                                : run.at("signals").contains("relative_l1")               ? "relative_l1"
                                : run.at("signals").contains("accumulated_distance_compared") ? "accumulated_distance_compared"
                                                                                          : "accumulated_err_compared";
        for (const auto & r : records) {
            if (sig.empty()) break;  // calibration compares nothing
            const auto & ref = run.at("signals").at(sig).at(r.at("branch").get<std::string>()).at(r.at("step").get<size_t>());
            if (ref.is_null() || !r.contains("signal") || r.at("signal").is_null()) {
                EXPECT_EQ(ref.is_null(), !r.contains("signal") || r.at("signal").is_null()) << name << " " << r.dump();
                continue;
            }
            EXPECT_NEAR(r.at("signal").get<double>(), ref.get<double>(), 1e-5 * std::abs(ref.get<double>()) + 1e-7)
                << name << " " << r.dump();
        }
        if (name == "mag_calibrate") {
            EXPECT_TRUE(at::equal(got, off)) << "a calibration run computes every step: equal to no cache bitwise";
            for (const auto & [branch, ratios] : cache.calibration()) {
                const auto ref = run.at("calibration").at(branch).get<std::vector<double>>();
                ASSERT_EQ(ratios.size(), ref.size()) << branch;
                for (size_t i = 0; i < ratios.size(); ++i) EXPECT_NEAR(ratios[i], ref[i], 1e-5 * std::abs(ref[i])) << branch << " " << i;
            }
        } else {
            EXPECT_FALSE(at::equal(got, off)) << name << ": the cache reused nothing";
        }
    }
    EXPECT_GE(runs, 8);
}

TEST_F(Qi21CacheParity, EveryRouteWithTheCacheEqualsResidentBitwiseAndStreamsNoSkippedBlock) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    for (const std::string name : {"fbc_hi", "mag_hi", "sea_hi"}) {
        const auto & run = reference().at("runs").at(name);
        auto resident = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
        StepCache ref_cache(settings_of(run), steps);
        auto o = options();
        o.step_cache = &ref_cache;
        const auto want = qi::denoise(t.m, t.transformer, *resident, t.embeds, o);
        const auto records = ref_cache.take_step_records();
        uint64_t skipped_blocks = 0;
        for (const auto & r : records) skipped_blocks += uint64_t(layers - r.at("blocks_computed").get<int64_t>());
        ASSERT_GT(skipped_blocks, 0u) << name;
        for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                                 ddo::Route::group_leaf}) {
            const auto plan = ddo::test::cpu_plan("transformer", route, linear, route == ddo::Route::dynamic ? 1e-5 : 0);
            auto src = qi::make_engine_blocks(kDir / "checkpoint" / "transformer", t.m.transformer_config, at::kFloat, plan);
            StepCache cache(settings_of(run), steps);
            o.step_cache = &cache;
            const auto got = qi::denoise(t.m, t.transformer, *src, t.embeds, o);
            EXPECT_EQ(src->finish(), 0u);
            EXPECT_TRUE(at::equal(want, got)) << name << " route " << ddo::to_string(route) << " differs from resident";
            EXPECT_EQ(pattern_of(cache.take_step_records(), steps), pattern_of(records, steps)) << ddo::to_string(route);
            const auto c = src->report().at("engine").at("counters");
            // Every block the cache skipped was told to the engine, and nothing else was: acquires + skips = the
            // block-steps of every pass (hits + misses count the acquires).
            const uint64_t passes = records.size();
            // group_leaf: a block is several leaf groups, each skipped.
            if (route == ddo::Route::group_leaf) {
                EXPECT_GT(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
            } else {
                EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
            }
            if (route != ddo::Route::group_leaf) {
                EXPECT_EQ(c.at("hits").get<uint64_t>() + c.at("misses").get<uint64_t>() + c.at("skipped_groups").get<uint64_t>(),
                          passes * uint64_t(layers))
                    << c.dump();
            }
            const bool streams = route != ddo::Route::resident;
            if (streams) {
                EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << ddo::to_string(route) << " " << c.dump();
            } else {
                EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
            }
            std::cout << "[ routes    ] " << name << " " << ddo::to_string(route) << " == resident bitwise; skipped "
                      << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed, "
                      << c.at("bytes_moved") << " bytes moved\n";
        }
    }
}

TEST_F(Qi21CacheParity, EveryTaylorSeerRunEqualsDiffusersHookWithTheSameModuleSchedule) {
    Tiny t;
    const auto want = qi::TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        if (run.at("kind") != "taylorseer_cache") continue;
        ++runs;
        auto src = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
        auto cache = cache_for(run, steps, t.m.transformer_config);
        auto o = options();
        o.use_kv_cache = run.at("use_kv_cache").get<bool>();
        o.step_cache = cache.get();
        const auto got = qi::denoise(t.m, t.transformer, *src, t.embeds, o);
        // The expansion's arithmetic is the hook's, op for op: the latents are those of diffusers (fp32, 1e-4 as the
        // other runs; measured 0).
        expect_close(name + " latents", got, want.read(name + ".latents"), 1e-4);
        const auto summary = cache->summary();
        const auto order = summary.at("hooked_modules").get<std::vector<std::string>>();
        auto hooked = order;
        auto ref_hooked = run.at("hooked_modules").get<std::vector<std::string>>();
        std::sort(hooked.begin(), hooked.end());
        std::sort(ref_hooked.begin(), ref_hooked.end());
        EXPECT_EQ(hooked, ref_hooked) << name;
        const auto pattern = module_pattern_of(cache->take_step_records(), order);
        for (const auto & branch : {"cond", "uncond"})
            for (const auto & [module, p] : run.at("module_pattern").at(branch).items()) {
                EXPECT_EQ(pattern.at(branch).at(module), p.get<std::string>()) << name << " " << branch << " " << module;
                std::cout << "[ modules   ] " << name << " " << branch << " " << module << " "
                          << pattern.at(branch).at(module) << "\n";
            }
        EXPECT_GT(summary.at("module_calls_predicted").get<uint64_t>(), 0u) << name;
        EXPECT_GT(summary.at("memory").at("peak_bytes").get<uint64_t>(), 0u) << name;
        const auto base = want.read(o.use_kv_cache ? "off_kv.latents" : "off.latents");
        EXPECT_FALSE(at::equal(got, base)) << name << ": nothing was predicted";
    }
    EXPECT_GE(runs, 5);
}

// Lite mode skips every block on a predicted step: on every route the latents equal the resident blocks' bitwise, and
// the skipped blocks are neither acquired nor streamed.
TEST_F(Qi21CacheParity, TaylorSeerLiteSkipsTheStreamingOfEveryBlockOnAPredictedStep) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    const auto & run = reference().at("runs").at("ts_lite");
    auto resident = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
    auto ref_cache = cache_for(run, steps, t.m.transformer_config);
    auto o = options();
    o.step_cache = ref_cache.get();
    const auto want = qi::denoise(t.m, t.transformer, *resident, t.embeds, o);
    uint64_t skipped_blocks = 0;
    for (const auto & r : ref_cache->take_step_records()) skipped_blocks += uint64_t(layers - r.at("blocks_computed").get<int64_t>());
    // 13 of 20 steps predicted, both branches, every block.
    EXPECT_EQ(skipped_blocks, uint64_t(2 * 13 * layers));
    for (const auto route : {ddo::Route::dynamic, ddo::Route::disk}) {
        const auto plan = ddo::test::cpu_plan("transformer", route, linear, route == ddo::Route::dynamic ? 1e-5 : 0);
        auto src = qi::make_engine_blocks(kDir / "checkpoint" / "transformer", t.m.transformer_config, at::kFloat, plan);
        auto cache = cache_for(run, steps, t.m.transformer_config);
        o.step_cache = cache.get();
        const auto got = qi::denoise(t.m, t.transformer, *src, t.embeds, o);
        EXPECT_EQ(src->finish(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << ddo::to_string(route) << " differs from resident";
        const auto c = src->report().at("engine").at("counters");
        EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
        EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
        std::cout << "[ routes    ] ts_lite " << ddo::to_string(route) << " == resident bitwise; skipped "
                  << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed\n";
    }
}
