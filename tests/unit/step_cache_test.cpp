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
    EXPECT_NE(unknown.find("off, first_block or mag"), std::string::npos) << unknown;
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
