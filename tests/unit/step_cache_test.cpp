// The model kit's step cache (ddo/model/step_cache.hpp, Note [Step caching]) on synthetic block stacks: what each
// kind computes, reuses and tells the weights to skip; cache.* refused with the key named; MagCache's ratio
// resampling equal to diffusers' nearest_interp (the index lists below are torch's, printed by
// `torch.round(torch.arange(n, dtype=torch.float32) * ((s - 1) / (n - 1))).long()`). Parity with diffusers' hooks on
// a real pipeline is tests/parity/qwen_image_21_cache_parity_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/preset/resolved_settings.hpp"

using ddo::model::StepCache;
using ddo::model::StepCacheKind;
using ddo::model::StepCacheSettings;
using ddo::model::Streams;

namespace {

ddo::ResolvedSettings settings(const std::vector<std::pair<std::string, nlohmann::json>> & set) {
    ddo::ResolvedSettings s;
    for (const auto & [k, v] : set) s.set(k, {v, {ddo::SettingLayer::command_line, "--set", 0, 0}});
    return s;
}

std::string usage_error(const ddo::ResolvedSettings & s) {
    try {
        (void)StepCacheSettings::read(s);
    } catch (const ddo::UsageError & e) {
        return e.what();
    }
    return "";
}

// Block i: x * (1.01 + 0.01 i) + 0.1 (every block changes x; block 0's residual 0.01 x + 0.1 follows the input).
struct Stack {
    explicit Stack(int64_t n) : blocks(n) {}
    int64_t blocks;
    std::vector<int64_t> computed, skipped;
    Streams run(StepCache & cache, const std::string & branch, int step, const at::Tensor & x) {
        return cache.run(
            branch, step, {x}, blocks,
            [&](int64_t i, const Streams & in) {
                computed.push_back(i);
                return Streams{in.front() * (1.01 + 0.01 * double(i)) + 0.1};
            },
            [&](int64_t i) {
                skipped.push_back(i);
                return uint64_t(100);
            });
    }
};

}  // namespace

TEST(StepCacheSettings, EachKindReadsItsOwnKeysAndRefusesTheOthers) {
    EXPECT_EQ(StepCacheSettings::read(settings({})).kind, StepCacheKind::off);
    auto fb = StepCacheSettings::read(settings({{"cache.kind", "first_block"}}));
    EXPECT_EQ(fb.kind, StepCacheKind::first_block);
    EXPECT_DOUBLE_EQ(fb.threshold, 0.05);  // FirstBlockCacheConfig's default
    auto mag = StepCacheSettings::read(settings({{"cache.kind", "mag"}, {"cache.calibrate", true}}));
    EXPECT_DOUBLE_EQ(mag.threshold, 0.06);  // MagCacheConfig's defaults
    EXPECT_EQ(mag.max_skip_steps, 3);
    EXPECT_DOUBLE_EQ(mag.retention_ratio, 0.2);
    const auto other = usage_error(settings({{"cache.kind", "first_block"}, {"cache.max_skip_steps", 2}}));
    EXPECT_NE(other.find("cache.max_skip_steps"), std::string::npos) << other;
    EXPECT_NE(other.find("applies to cache.kind mag"), std::string::npos) << other;
    const auto off = usage_error(settings({{"cache.threshold", 0.1}}));
    EXPECT_NE(off.find("cache.kind is off"), std::string::npos) << off;
    const auto unknown = usage_error(settings({{"cache.kind", "teacache"}}));
    EXPECT_NE(unknown.find("off, first_block, mag, taylorseer or sea"), std::string::npos) << unknown;
    const auto no_ratios = usage_error(settings({{"cache.kind", "mag"}}));
    EXPECT_NE(no_ratios.find("cache.mag_ratios"), std::string::npos) << no_ratios;
    EXPECT_NE(no_ratios.find("cache.calibrate=true"), std::string::npos) << no_ratios;
    const auto both = usage_error(settings({{"cache.kind", "mag"}, {"cache.calibrate", true}, {"cache.mag_ratios", {1.0, 1.0}}}));
    EXPECT_NE(both.find("remove one of the two keys"), std::string::npos) << both;
    const auto negative = usage_error(settings({{"cache.kind", "first_block"}, {"cache.threshold", -0.1}}));
    EXPECT_NE(negative.find("cache.threshold"), std::string::npos) << negative;
}

TEST(StepCache, AScheduleBelowMinStepsIsRefusedUnlessAllowed) {
    StepCacheSettings s;
    s.kind = StepCacheKind::first_block;
    try {
        StepCache c(s, 8);
        FAIL() << "an 8-step schedule was accepted";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find("cache.min_steps = 10"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cache.allow_few_steps"), std::string::npos) << e.what();
    }
    s.allow_few_steps = true;
    EXPECT_NO_THROW(StepCache(s, 8));
}

TEST(StepCache, NearestInterpIsDiffusersIndexForIndexTiesToEven) {
    std::vector<double> src(28);
    for (size_t i = 0; i < src.size(); ++i) src[i] = double(i);
    auto idx = [&](int n, int s) {
        std::vector<double> from(src.begin(), src.begin() + s);
        std::vector<int> out;
        for (float v : ddo::model::nearest_interp(from, n)) out.push_back(int(v));
        return out;
    };
    EXPECT_EQ(idx(20, 28), (std::vector<int>{0, 1, 3, 4, 6, 7, 9, 10, 11, 13, 14, 16, 17, 18, 20, 21, 23, 24, 26, 27}));
    EXPECT_EQ(idx(40, 28), (std::vector<int>{0,  1,  1,  2,  3,  3,  4,  5,  6,  6,  7,  8,  8,  9,  10, 10, 11, 12, 12, 13,
                                             14, 15, 15, 16, 17, 17, 18, 19, 19, 20, 21, 21, 22, 23, 24, 24, 25, 26, 26, 27}));
    EXPECT_EQ(idx(9, 5), (std::vector<int>{0, 0, 1, 2, 2, 2, 3, 4, 4}));  // 0.5, 2.5 and 3.5 round to even
    EXPECT_EQ(idx(13, 4), (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3}));
    EXPECT_EQ(idx(1, 28), (std::vector<int>{27}));
    EXPECT_EQ(idx(28, 28).size(), 28u);
}

TEST(StepCache, FirstBlockReusesTheTailResidualAndSkipsEveryOtherBlock) {
    StepCacheSettings s;
    s.kind = StepCacheKind::first_block;
    s.threshold = 0.5;  // the stack's block-0 residual barely changes between passes below
    s.min_steps = 1;
    StepCache cache(s, 3);
    Stack st(4);
    const auto x0 = at::full({1, 3, 2}, 1.0);
    const auto out0 = st.run(cache, "cond", 0, x0).front();
    EXPECT_EQ(st.computed, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_TRUE(st.skipped.empty());
    // Second pass, slightly different input: block 0 runs, its residual changed by < 50 %: blocks 1..3 are skipped
    // and the output is block 0's output plus the last computed pass's (tail output - head output).
    st.computed.clear();
    const auto x1 = at::full({1, 3, 2}, 1.1);
    const auto out1 = st.run(cache, "cond", 1, x1).front();
    EXPECT_EQ(st.computed, (std::vector<int64_t>{0}));
    EXPECT_EQ(st.skipped, (std::vector<int64_t>{1, 2, 3}));
    const auto head0 = x0 * 1.01 + 0.1, head1 = x1 * 1.01 + 0.1;
    EXPECT_TRUE(at::allclose(out1, (out0 - head0) + head1));
    // Another branch keeps its own state: its first pass computes everything.
    st.computed.clear();
    st.run(cache, "uncond", 1, x1);
    EXPECT_EQ(st.computed.size(), 4u);
    const auto rec = cache.take_step_records();
    ASSERT_EQ(rec.size(), 3u);
    EXPECT_FALSE(rec[1].at("computed").get<bool>());
    EXPECT_EQ(rec[1].at("bytes_not_streamed").get<uint64_t>(), 300u);
    EXPECT_EQ(rec[1].at("blocks_computed").get<int64_t>(), 1);
    EXPECT_TRUE(rec[2].at("signal").is_null());
    const auto sum = cache.summary();
    EXPECT_EQ(sum.at("computed_block_steps").get<uint64_t>(), 9u);
    EXPECT_EQ(sum.at("block_steps").get<uint64_t>(), 12u);
    EXPECT_EQ(sum.at("bytes_not_streamed").get<uint64_t>(), 300u);
    EXPECT_TRUE(sum.at("fired").get<bool>());
    EXPECT_GT(sum.at("memory").at("peak_bytes").get<uint64_t>(), 0u);
}

TEST(StepCache, FirstBlockThatNeverFiresSaysSo) {
    StepCacheSettings s;
    s.kind = StepCacheKind::first_block;
    s.threshold = 0.0;
    s.min_steps = 1;
    StepCache cache(s, 3);
    Stack st(3);
    for (int i = 0; i < 3; ++i) st.run(cache, "cond", i, at::full({1, 2, 2}, 1.0 + 0.5 * i));
    const auto sum = cache.summary();
    EXPECT_FALSE(sum.at("fired").get<bool>());
    EXPECT_NE(sum.at("fired_reason").get<std::string>().find("never fell below"), std::string::npos) << sum.dump();
}

TEST(StepCache, MagSkipsWholeStepsByTheAccumulatedErrorAndBoundsTheRun) {
    StepCacheSettings s;
    s.kind = StepCacheKind::mag;
    s.min_steps = 1;
    s.threshold = 0.06;
    s.max_skip_steps = 2;
    s.retention_ratio = 0.2;            // int(0.2 * 10 + 0.5) = 2 retained steps
    s.mag_ratios = std::vector<double>(10, 0.99);  // |1 - ratio| accumulates 0.01, 0.0199, ...
    StepCache cache(s, 10);
    Stack st(3);
    std::string pattern;
    for (int i = 0; i < 10; ++i) {
        const size_t before = st.computed.size();
        st.run(cache, "cond", i, at::full({1, 2, 2}, 1.0 + 0.01 * i));
        pattern += st.computed.size() > before ? 'C' : 'R';
    }
    // Steps 0-1 retained; then each reuse needs a kept residual, error <= 0.06 and at most 2 in a row.
    EXPECT_EQ(pattern, "CCRRCRRCRR");
    const auto rec = cache.take_step_records();
    EXPECT_EQ(rec[2].at("blocks_computed").get<int64_t>(), 0);
    EXPECT_EQ(rec[2].at("bytes_not_streamed").get<uint64_t>(), 300u);
    EXPECT_TRUE(rec[0].at("signal").is_null());
}

TEST(StepCacheSettings, TaylorSeerReadsItsKeysAndRefusesWhatItCannotHonour) {
    const auto s = StepCacheSettings::read(settings({{"cache.kind", "taylorseer"},
                                                     {"cache.max_order", 2},
                                                     {"cache.cache_identifiers", "transformer_blocks\\.0\\.attn"}}));
    EXPECT_EQ(s.kind, StepCacheKind::taylorseer);
    EXPECT_EQ(s.cache_interval, 5);  // TaylorSeerCacheConfig's defaults
    EXPECT_EQ(s.disable_cache_before_step, 3);
    EXPECT_FALSE(s.disable_cache_after_step.has_value());
    EXPECT_EQ(s.max_order, 2);
    EXPECT_EQ(s.taylor_factors_dtype, "bf16");
    EXPECT_EQ(s.cache_identifiers, std::vector<std::string>{"transformer_blocks\\.0\\.attn"});
    EXPECT_EQ(s.to_json().at("source").count("cache.max_order"), 1u);
    // A taylorseer key under another kind, and another kind's key under taylorseer.
    const auto foreign = usage_error(settings({{"cache.kind", "mag"}, {"cache.calibrate", true}, {"cache.max_order", 2}}));
    EXPECT_NE(foreign.find("cache.max_order = 2"), std::string::npos) << foreign;
    EXPECT_NE(foreign.find("applies to cache.kind taylorseer"), std::string::npos) << foreign;
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"}, {"cache.threshold", 0.1}})).find("cache.threshold"),
              std::string::npos);
    // Step 0 would be predicted before anything was computed.
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"}, {"cache.disable_cache_before_step", 0}}))
                  .find("step 0 would be predicted"),
              std::string::npos);
    EXPECT_EQ(usage_error(settings({{"cache.kind", "taylorseer"},
                                    {"cache.disable_cache_before_step", 0},
                                    {"cache.cache_interval", 1}})),
              "");
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"},
                                    {"cache.use_lite_mode", true},
                                    {"cache.skip_predict_identifiers", nlohmann::json::array({"proj_out"})}}))
                  .find("cache.use_lite_mode = true"),
              std::string::npos);
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"}, {"cache.cache_identifiers", "transformer_blocks.(attn"}}))
                  .find("not a regular expression"),
              std::string::npos);
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"}, {"cache.cache_identifiers", std::string(300, 'a')}}))
                  .find("at most 256 characters"),
              std::string::npos);
    EXPECT_NE(usage_error(settings({{"cache.kind", "taylorseer"}, {"cache.taylor_factors_dtype", "int8"}}))
                  .find("give bf16, fp16 or fp32"),
              std::string::npos);
    EXPECT_NE(usage_error(settings({{"cache.kind", "faster_cache"}})).find("give off, first_block, mag, taylorseer or sea"),
              std::string::npos);
}

namespace {

StepCacheSettings taylorseer(std::vector<std::pair<std::string, nlohmann::json>> set) {
    set.emplace_back("cache.kind", "taylorseer");
    auto s = StepCacheSettings::read(settings(set));
    s.min_steps = 1;
    return s;
}

std::string bind_error(const StepCacheSettings & s, const std::vector<std::string> & hookable,
                       const std::vector<std::string> & modules) {
    StepCache cache(s, 10);
    try {
        cache.bind_modules(hookable, modules);
    } catch (const ddo::UsageError & e) {
        return e.what();
    }
    return "";
}

const std::vector<std::string> kHookable = {"transformer_blocks.0", "transformer_blocks.0.attn", "transformer_blocks.1",
                                            "transformer_blocks.1.attn", "proj_out"};
const std::vector<std::string> kModules = {"",
                                           "transformer_blocks",
                                           "transformer_blocks.0",
                                           "transformer_blocks.0.attn",
                                           "transformer_blocks.0.attn.to_q",
                                           "transformer_blocks.0.ff",
                                           "transformer_blocks.1",
                                           "transformer_blocks.1.attn",
                                           "transformer_blocks.1.attn.to_q",
                                           "transformer_blocks.1.ff",
                                           "norm_out",
                                           "proj_out"};

}  // namespace

TEST(StepCache, TaylorSeerBindsPatternsToTheModulesThePluginCanHook) {
    // diffusers' default: every transformer_blocks.<i>.attn.
    StepCache cache(taylorseer({}), 10);
    cache.bind_modules(kHookable, kModules);
    EXPECT_TRUE(cache.hooked("transformer_blocks.0.attn"));
    EXPECT_TRUE(cache.hooked("transformer_blocks.1.attn"));
    EXPECT_FALSE(cache.hooked("transformer_blocks.0"));
    EXPECT_FALSE(cache.hooked("proj_out"));
    // Lite: blocks skip, proj_out predicts.
    StepCache lite(taylorseer({{"cache.use_lite_mode", true}}), 10);
    lite.bind_modules(kHookable, kModules);
    EXPECT_TRUE(lite.hooked("transformer_blocks.0"));
    EXPECT_TRUE(lite.hooked("proj_out"));
    EXPECT_FALSE(lite.hooked("transformer_blocks.0.attn"));
    // A pattern that also matches a module the plugin cannot hook (the feed-forward here), the whole model, or nothing.
    EXPECT_NE(bind_error(taylorseer({{"cache.cache_identifiers", "transformer_blocks\\.0.*"}}), kHookable, kModules)
                  .find("matches module 'transformer_blocks.0.attn.to_q', which this plugin cannot route"),
              std::string::npos);
    EXPECT_NE(bind_error(taylorseer({{"cache.cache_identifiers", ".*"}}), kHookable, kModules).find("(the model)"),
              std::string::npos);
    EXPECT_NE(bind_error(taylorseer({{"cache.skip_predict_identifiers", "single_blocks\\..*"}}), kHookable, kModules)
                  .find("cache.skip_predict_identifiers: the pattern \"single_blocks\\..*\" matches no module"),
              std::string::npos);
    // diffusers' default set on a model without such attention modules hooks nothing: refused, not a silent no-op.
    EXPECT_NE(bind_error(taylorseer({}), {"blocks_x.0"}, {"blocks_x", "blocks_x.0"}).find("hooks no module"),
              std::string::npos);
}

TEST(StepCache, TaylorSeerPredictsByTheExpansionOnTheHookSchedule) {
    // cache_interval 3, warm-up 2, order 1, fp32 factors: steps 0, 1 compute, 2 predicts, then (step - 3) % 3 == 0
    // computes: C C P C P P C P P C.
    StepCache cache(taylorseer({{"cache.cache_interval", 3},
                                {"cache.disable_cache_before_step", 2},
                                {"cache.taylor_factors_dtype", "fp32"},
                                {"cache.cache_identifiers", "proj_out"}}),
                    10);
    cache.bind_modules(kHookable, kModules);
    std::string pattern;
    std::vector<double> got;
    for (int step = 0; step < 10; ++step) {
        // f(step) = 2 step + 1 computed; predicted by order 1 from the last two computed steps, exactly linear.
        auto call = cache.module("cond", "proj_out", [&] {
            return ddo::model::Outputs{at::full({2}, 2.0 * step + 1.0, at::kFloat)};
        });
        pattern += call.computed ? 'C' : 'P';
        got.push_back(call.outputs.front()[0].item<double>());
    }
    EXPECT_EQ(pattern, "CCPCPPCPPC");
    for (int step = 0; step < 10; ++step) EXPECT_DOUBLE_EQ(got[size_t(step)], 2.0 * step + 1.0) << step;
    // Branches keep their own schedules.
    auto call = cache.module("uncond", "proj_out", [&] { return ddo::model::Outputs{at::ones({2})}; });
    EXPECT_TRUE(call.computed);
    // A module that is not hooked always computes.
    EXPECT_TRUE(cache.module("cond", "transformer_blocks.0.attn", [&] { return ddo::model::Outputs{at::ones({2})}; }).computed);
    const auto summary = cache.summary();
    EXPECT_EQ(summary.at("module_calls_predicted").get<int>(), 5);
    EXPECT_EQ(summary.at("hooked_modules"), nlohmann::json::array({"proj_out"}));
}

TEST(StepCache, TaylorSeerLiteSkipsEveryBlockOfAPredictedPassAndNamesThemInTheRecord) {
    StepCache cache(taylorseer({{"cache.use_lite_mode", true}}), 10);
    cache.bind_modules(kHookable, kModules);
    Stack stack(2);
    std::string passes;
    for (int step = 0; step < 10; ++step) {
        const auto out = stack.run(cache, "cond", step, at::ones({1, 3, 4}));
        const auto y = cache.module("cond", "proj_out", [&] { return ddo::model::Outputs{out.front() * 2}; });
        auto records = cache.take_step_records();
        ASSERT_EQ(records.size(), 1u);
        passes += records[0].at("modules").get<std::string>() + " ";
        if (!y.computed) {
            EXPECT_TRUE(at::equal(out.front(), at::zeros({1, 3, 4}))) << "a skipped block returns zeros";
            EXPECT_FALSE(records[0].at("computed").get<bool>());
            EXPECT_EQ(records[0].at("bytes_not_streamed").get<uint64_t>(), 200u);
        }
    }
    // Warm-up 3, then (step - 4) % 5 == 0 computes: steps 3, 5-8 predicted.
    EXPECT_EQ(passes, "CCC CCC CCC PPP CCC PPP PPP PPP PPP CCC ");
    EXPECT_EQ(stack.skipped.size(), 10u);
    EXPECT_EQ(cache.summary().at("hooked_modules"),
              nlohmann::json::array({"transformer_blocks.0", "transformer_blocks.1", "proj_out"}));
}

TEST(StepCacheSettings, SeaReadsItsKeysWithDiffusersDefaults) {
    const auto s = StepCacheSettings::read(settings({{"cache.kind", "sea"}}));
    EXPECT_EQ(s.kind, StepCacheKind::sea);
    EXPECT_DOUBLE_EQ(s.threshold, 0.25);  // SeaCacheConfig's defaults
    EXPECT_EQ(s.residual_order, 1);
    EXPECT_EQ(s.retention_steps, 1);
    EXPECT_EQ(s.cache_end_steps, 1);
    EXPECT_EQ(s.max_consecutive_cached, 2);
    EXPECT_DOUBLE_EQ(s.power_exp, 3.0);
    const auto foreign = usage_error(settings({{"cache.kind", "first_block"}, {"cache.power_exp", 2.0}}));
    EXPECT_NE(foreign.find("applies to cache.kind sea"), std::string::npos) << foreign;
    EXPECT_NE(usage_error(settings({{"cache.kind", "sea"}, {"cache.residual_order", 2}})).find("give 0 or 1"),
              std::string::npos);
    EXPECT_NE(usage_error(settings({{"cache.kind", "sea"}, {"cache.power_exp", 0.0}})).find("cache.power_exp"),
              std::string::npos);
}

TEST(StepCache, SeaReusesTheStackWhileTheFilteredLatentsHoldStillAndExtrapolatesTheResidual) {
    auto s = StepCacheSettings::read(settings({{"cache.kind", "sea"}}));
    s.min_steps = 1;
    StepCache cache(s, 10);
    std::vector<int64_t> skipped;
    std::string pattern;
    for (int step = 0; step < 10; ++step) {
        // The latents and sigma do not change: the filtered indicator's distance is 0, so only the guards force a full
        // pass (the filter's gain depends on sigma: a changing sigma alone moves the indicator).
        cache.observe("cond", 0.5, {at::ones({1, 1, 4, 4})});
        const auto x = at::zeros({1, 3, 2});
        // A stack whose residual grows by one per step: order 1 extrapolates it exactly.
        const auto out = cache.run(
            "cond", step, {x}, 2,
            [&](int64_t i, const Streams & in) { return Streams{in.front() + (i == 0 ? double(step + 1) : 0.0)}; },
            [&](int64_t i) {
                skipped.push_back(i);
                return uint64_t(7);
            });
        auto records = cache.take_step_records();
        pattern += records.at(0).at("computed").get<bool>() ? 'C' : 'R';
        // Step 1 has one full pass behind it (order 0 then): its residual. Later reuses extrapolate from two.
        const double expected = step == 1 || step == 2 ? 1.0 : double(step + 1);
        EXPECT_NEAR(out.front().mean().item<double>(), expected, 1e-5) << step;
    }
    // Step 0 retained and first observed; at most max_consecutive_cached = 2 in a row; the last step computes.
    EXPECT_EQ(pattern, "CRRCRRCRRC");
    EXPECT_EQ(skipped.size(), 12u);
    EXPECT_EQ(cache.summary().at("bytes_not_streamed").get<uint64_t>(), 84u);
}
