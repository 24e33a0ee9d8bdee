// The model kit's memory forecast (ddo/model/memory_forecast.hpp, Note [Memory forecast]) on stated stages, and the
// counting CPU allocator (ddo/torch/allocation_meter.hpp) on tensors of known size. The forecast of a real plugin
// against its measured peaks is tests/e2e/memory_forecast_e2e_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>

#include "ddo/model/memory_forecast.hpp"
#include "ddo/torch/allocation_meter.hpp"
#include "scratch_pool.hpp"  // core/model/src: internal to libddo_model

using ddo::model::Footprint;
using ddo::model::ForecastShape;
using ddo::model::MachineBudget;
using ddo::model::MemoryForecast;
using ddo::model::MemorySide;
using ddo::model::StageMemory;

namespace {

constexpr std::uint64_t MiB = 1024 * 1024;

// A stage whose activations grow with the size: one [w, h] float tensor, plus fixed weights.
std::vector<StageMemory> image_stage(const ForecastShape & s) {
    StageMemory denoise("denoise");
    denoise.weights("transformer").tensor("activations", {s.width, s.height}, at::kFloat);
    StageMemory video("video");
    video.tensor("frames", {s.frames, s.width, s.height}, at::kFloat);
    return {denoise, video};
}

MachineBudget gpu(std::uint64_t device, std::uint64_t host) {
    MachineBudget m;
    m.device = {device, "--device-memory"};
    m.host = {host, "--host-memory"};
    return m;
}

}  // namespace

TEST(MemoryForecast, RoundsEachAllocationAsItsAllocatorDoes) {
    EXPECT_EQ(ddo::model::rounded_bytes(0, true), 0u);
    EXPECT_EQ(ddo::model::rounded_bytes(1, true), 512u);
    EXPECT_EQ(ddo::model::rounded_bytes(513, true), 1024u);
    EXPECT_EQ(ddo::model::rounded_bytes(1, false), 16u);   // glibc's header and 16-byte granule
    EXPECT_EQ(ddo::model::rounded_bytes(64, false), 80u);
}

TEST(MemoryForecast, SumsTermsAndWeightsPerPhaseAndSide) {
    MemoryForecast f(/*cuda=*/true);
    f.set_weights("transformer", Footprint{100 * MiB, 30 * MiB}, {{"route", "dynamic"}});
    StageMemory s("denoise");
    s.weights("transformer")
        .tensor("latents", {2, 1024, 64}, at::kBFloat16, 3)  // 256 KiB each
        .tensor("kv", {1, 100, 7}, at::kFloat, 2, MemorySide::host)
        .bytes("table", 1000);
    const auto phases = f.evaluate({s});
    ASSERT_EQ(phases.size(), 1u);
    EXPECT_EQ(phases[0].weights.device, 100 * MiB);
    EXPECT_EQ(phases[0].peak.device, 100 * MiB + 3 * 256 * 1024 + 1024);  // 1000 bytes -> two 512-byte granules
    EXPECT_EQ(phases[0].peak.host, 30 * MiB + 2 * 2816);                 // host terms: malloc's rounding, not CUDA's
    // A stage naming weights that were never planned is a plugin bug.
    StageMemory orphan("decode");
    orphan.weights("vae");
    EXPECT_THROW(f.evaluate({orphan}), std::logic_error);
    StageMemory bad("x");
    EXPECT_THROW(bad.tensor("zero", {0, 3}, at::kFloat), std::logic_error);
}

TEST(MemoryForecast, FindsTheFirstPhaseOverItsBudget) {
    MemoryForecast f(true);
    f.set_weights("transformer", Footprint{10 * MiB, 0}, nullptr);
    const auto phases = f.evaluate(image_stage({1024, 1024, 9}));  // denoise: 10 + 4 MiB; video: 36 MiB
    EXPECT_FALSE(MemoryForecast::first_excess(phases, gpu(64 * MiB, 64 * MiB)));
    auto e = MemoryForecast::first_excess(phases, gpu(20 * MiB, 64 * MiB));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->phase, "video");
    EXPECT_EQ(e->side, "device");
    EXPECT_EQ(e->budget, 20 * MiB);
    // The CPU: device and host draw on the same RAM, held against the host budget together.
    MachineBudget cpu;
    cpu.device_is_host = true;
    cpu.host = {40 * MiB, "MemAvailable"};
    EXPECT_FALSE(MemoryForecast::first_excess(phases, cpu));
    cpu.host.bytes = 30 * MiB;
    e = MemoryForecast::first_excess(phases, cpu);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->side, "host");
    // Unknown budgets refuse nothing (and the report says why: phases_json's margin_reason).
    MachineBudget unknown;
    EXPECT_FALSE(MemoryForecast::first_excess(phases, unknown));
    const auto j = MemoryForecast::phases_json(phases, unknown, true);
    EXPECT_TRUE(j[0]["device"]["budget_bytes"].is_null());
    EXPECT_TRUE(j[0]["device"].contains("margin_reason"));
}

TEST(MemoryForecast, SaysTheLargestSizeAndFramesThatFit) {
    MemoryForecast f(false);
    f.set_weights("transformer", Footprint{0, 0}, nullptr);
    const ForecastShape asked{2048, 1024, 121};
    // denoise: w*h*4 bytes; video: frames*w*h*4. Budget 64 MiB: at 2048x1024 the video phase needs 968 MiB.
    const auto fit = ddo::model::largest_fitting(f, image_stage, asked, gpu(64 * MiB, 1ull << 40), 32, 8);
    ASSERT_TRUE(fit.size);
    EXPECT_EQ(fit.size->height, fit.size->width / 2 / 32 * 32);  // the asked aspect ratio, 2:1, floored to 32
    EXPECT_EQ(fit.size->width % 32, 0);
    // It fits, and one step larger does not.
    EXPECT_FALSE(MemoryForecast::first_excess(f.evaluate(image_stage(*fit.size)), gpu(64 * MiB, 1ull << 40)));
    const ForecastShape larger{fit.size->width + 32, (fit.size->width + 32) / 2 / 32 * 32, 121};
    EXPECT_TRUE(MemoryForecast::first_excess(f.evaluate(image_stage(larger)), gpu(64 * MiB, 1ull << 40)));
    ASSERT_TRUE(fit.frames);
    EXPECT_EQ((fit.frames->frames - 1) % 8, 0);
    EXPECT_LE(std::uint64_t(fit.frames->frames) * 2048 * 1024 * 4, 64 * MiB);
    EXPECT_GT(std::uint64_t(fit.frames->frames + 8) * 2048 * 1024 * 4, 64 * MiB);
}

TEST(AllocationMeter, CountsLibTorchsCpuTensorsAndTheirPeak) {
    ddo::torch::AllocationMeter::install();
    const c10::Device cpu(c10::kCPU);
    ddo::torch::AllocationMeter::reset_peak(cpu);
    const auto before = ddo::torch::AllocationMeter::read(cpu);
    ASSERT_TRUE(before.current && before.peak) << before.reason;
    {
        auto a = at::empty({1024, 1024}, at::kFloat);  // 4 MiB
        auto b = at::empty({512, 1024}, at::kFloat);   // 2 MiB
        const auto during = ddo::torch::AllocationMeter::read(cpu);
        EXPECT_GE(*during.current - *before.current, 6 * MiB);
        EXPECT_LT(*during.current - *before.current, 6 * MiB + 64 * 1024);
    }
    const auto after = ddo::torch::AllocationMeter::read(cpu);
    EXPECT_EQ(*after.current, *before.current);  // both freed
    EXPECT_GE(*after.peak - *before.current, 6 * MiB);
    ddo::torch::AllocationMeter::reset_peak(cpu);
    EXPECT_EQ(*ddo::torch::AllocationMeter::read(cpu).peak, *after.current);
}

// Note [Memory forecast]: the forecast of a step's converted tensors on the CPU replays the scratch pool's policy over
// the groups' buffer sizes. Groups whose sizes do not nest (LTX-2's globals beside its blocks) reuse some buffers
// and allocate others; the replay must reach the peak the real pool reaches, as LibTorch's allocator counts it.
TEST(ScratchPoolReplay, ReachesThePeakTheRealPoolReachesOnGroupsWhoseSizesDoNotNest) {
    const std::uint64_t K = 64 * 1024;
    const std::vector<std::vector<std::uint64_t>> groups = {
        {3 * K, 40 * K, 5 * K},              // globals: one large table and two small ones
        {16 * K, 16 * K, 8 * K, 64 * K},     // blocks
        {16 * K, 16 * K, 8 * K, 64 * K},
        {16 * K, 16 * K, 8 * K, 64 * K, 2 * K},
    };
    ddo::torch::AllocationMeter::install();
    const c10::Device cpu(c10::kCPU);
    const auto step = [&] {
        ddo::model::ScratchPool pool;
        for (int pass = 0; pass < 2; ++pass)
            for (const auto & g : groups) {
                pool.begin_group();
                std::vector<at::Tensor> taken;
                for (const auto bytes : g) taken.push_back(pool.take({std::int64_t(bytes / 4)}, at::kFloat, cpu));
                pool.end_group();
                for (auto & t : taken) pool.give(std::move(t));
            }
        return pool.to_json().at("peak_bytes").get<std::uint64_t>();
    };
    (void)step();  // ATen's first use allocates for itself (alone in its process, the test would count that too)
    ddo::torch::AllocationMeter::reset_peak(cpu);
    const auto before = ddo::torch::AllocationMeter::read(cpu);
    ASSERT_TRUE(before.current && before.peak) << before.reason;
    const std::uint64_t pool_peak = step();
    const auto measured = *ddo::torch::AllocationMeter::read(cpu).peak - *before.current;
    const auto replayed = ddo::model::ScratchPool::replay_peak(groups, 2);
    EXPECT_EQ(replayed, pool_peak);
    // The allocator's count adds the empty tensor a reused buffer is set on (at most its 64-byte rounding each).
    EXPECT_GE(measured, replayed);
    EXPECT_LE(measured, replayed + 64 * 10);
    // Neither one group's worth (the sizes do not nest) nor the bound of twice the largest group.
    EXPECT_GT(replayed, 104 * K);
    EXPECT_LT(replayed, 2 * 106 * K);
}
