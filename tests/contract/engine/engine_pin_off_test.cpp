// The engine with pinning off by choice (the preset's capacities.pin_host_memory = false, which the model plugin
// passes as StagingLimits::pinned_route = false and EngineOptions::pinned_route = false): every route stays bitwise
// equal to resident, the pinned route is never asked (0 attempts: "off" is not a refusal and not a fallback, so
// pinned_fallbacks stays 0), host copies and the disk staging buffers are pageable, and the report says the
// pinned route was off and why. Registration is off here too, so nothing in these tests locks memory and no
// RLIMIT_MEMLOCK set-up is needed (docs/architecture.md, Note [Engine host staging]).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/platform/host_staging.hpp"
#include "ddo/store/weight_store.hpp"
#include "contract/engine/engine_test_model.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;
using platform::HostStaging;
using platform::RegistrationMode;
using platform::StagingBackend;
using platform::StagingLimits;

namespace {

const char * const kReason = "capacities.pin_host_memory = false";

using namespace ddo::testing::engine_model;  // linear(), kShape, store_once(), big_caps()

// resident: uploaded from the file through the 2 staging buffers. dynamic: group 0 resident (through the staging
// buffers), group 1 planned `pinned`, groups 2 and 3 pageable. disk: every group through the staging buffers.
// group_block: auto pinned budget, every group planned `pinned`. The plan is given pinned groups on purpose: the
// engine must keep them pageable when pinning is off, whatever the plan says (the plugin also plans none).
enum class Case { resident, dynamic, disk, group_block };

const char * name(Case k) {
    switch (k) {
    case Case::resident: return "resident";
    case Case::dynamic: return "dynamic";
    case Case::disk: return "disk";
    case Case::group_block: return "group_block";
    }
    return "?";
}

struct RunOut {
    std::vector<float> out;
    nlohmann::json json;
    std::uint64_t owners = 1;
    std::uint64_t planned_pinned = 0;  // groups the plan marked `pinned`
};

RunOut run(Case k, HostStaging * staging, bool pinned_route) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.ram_headroom = 0;
    cfg.device_headroom = 0;
    switch (k) {
    case Case::resident: cfg.route = Route::resident; break;
    case Case::dynamic:
        cfg.route = Route::dynamic;
        cfg.resident_budget = layout.group(0).bytes;
        cfg.pinned_budget = layout.group(1).bytes;
        break;
    case Case::disk: cfg.route = Route::disk; break;
    case Case::group_block: cfg.route = Route::group_block; break;
    }
    auto tr = make_cpu_transport();
    EngineOptions eo;
    eo.map_file_residents = false;  // the copy path (file -> staging -> pool), which the CUDA transport takes
    eo.read_files_into_destination = false;
    eo.staging = staging;
    eo.pinned_route = pinned_route;
    if (!pinned_route) eo.pinned_route_reason = kReason;
    Plan plan = plan_residency(layout, cfg, big_caps());
    RunOut r;
    for (const auto & g : plan.groups) r.planned_pinned += g.residency == Residency::pinned ? 1 : 0;
    Engine e(layout, std::move(plan), linear(), *tr, eo);
    e.begin_phase("denoise");
    r.out = bench::run_synthetic(e, kShape, 2);
    r.owners = e.end_phase();
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
    r.json = e.to_json();
    return r;
}

std::unique_ptr<HostStaging> make_pin_off_staging() {
    StagingLimits limits;
    limits.pinned_route = false;
    limits.pinned_route_reason = kReason;
    limits.registration = RegistrationMode::off;
    std::string reason;
    auto s = HostStaging::create(StagingBackend::host, limits, nullptr, &reason);
    EXPECT_TRUE(s) << reason;
    return s;
}

bool bitwise_equal(const std::vector<float> & a, const std::vector<float> & b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(EnginePinOff, RoutesStayBitwiseEqualAndThePinnedRouteIsNeverAsked) {
    const std::vector<float> ref = run(Case::resident, nullptr, true).out;
    for (Case k : {Case::resident, Case::dynamic, Case::disk, Case::group_block}) {
        auto staging = make_pin_off_staging();
        ASSERT_TRUE(staging);
        RunOut o = run(k, staging.get(), /*pinned_route=*/true);  // the staging's limits alone switch it off
        EXPECT_TRUE(bitwise_equal(o.out, ref)) << name(k) << " with pinning off differs from resident";
        EXPECT_EQ(o.owners, 0u) << name(k);
        const auto & c = o.json.at("counters");
        const auto & hs = o.json.at("host_staging");
        const auto & p = hs.at("pinned");
        // Zero attempts: HostStaging counts every call, even one it refuses because the route is off.
        EXPECT_EQ(p.at("attempts"), 0) << name(k) << ": " << hs.dump();
        EXPECT_EQ(p.at("refusals"), 0) << name(k);
        EXPECT_EQ(p.at("bytes_total"), 0) << name(k);
        EXPECT_EQ(c.at("pinned_fallbacks"), 0) << name(k) << ": " << c.dump();
        EXPECT_EQ(c.at("pinned_fallback_bytes"), 0) << name(k);
        EXPECT_TRUE(c.at("pinned_fallback_reasons").empty()) << name(k);
        EXPECT_EQ(c.at("pinned_bytes"), 0) << name(k);
        EXPECT_EQ(c.at("failures"), 0) << name(k);
        EXPECT_EQ(hs.at("registration").at("attempts"), 0) << name(k);  // registration off: not asked either
        // Staging buffers exist (the file uploads need them) and are pageable.
        if (k != Case::group_block) {
            EXPECT_GT(c.at("staging_bytes").get<std::uint64_t>(), 0u) << name(k);
            EXPECT_EQ(c.at("staging_pinned_bytes"), 0) << name(k);
        }
        // Groups the plan wanted pinned became pageable host copies.
        if (k == Case::dynamic || k == Case::group_block) {
            EXPECT_GT(o.planned_pinned, 0u) << name(k) << ": the case must plan pinned groups to test anything";
            EXPECT_GT(c.at("pageable_bytes").get<std::uint64_t>(), 0u) << name(k);
            EXPECT_GT(c.at("bytes_moved").at("pinned").get<std::uint64_t>(), 0u) << name(k);  // by plan, as documented
        }
        // The report says the pinned route was off, and why.
        EXPECT_EQ(hs.at("limits").at("pinned_route"), "off") << hs.dump();
        EXPECT_EQ(hs.at("limits").at("pinned_route_reason"), kReason) << hs.dump();
    }
}

TEST(EnginePinOff, EngineOptionOffWithoutStagingUsesPageableMemory) {
    const std::vector<float> ref = run(Case::resident, nullptr, true).out;
    for (Case k : {Case::disk, Case::group_block}) {
        RunOut o = run(k, nullptr, /*pinned_route=*/false);
        EXPECT_TRUE(bitwise_equal(o.out, ref)) << name(k);
        const auto & c = o.json.at("counters");
        EXPECT_EQ(c.at("pinned_bytes"), 0) << name(k) << ": " << c.dump();
        EXPECT_EQ(c.at("staging_pinned_bytes"), 0) << name(k);
        EXPECT_EQ(c.at("pinned_fallbacks"), 0) << name(k);
        EXPECT_TRUE(o.json.at("host_staging").is_null());
        const auto why = o.json.at("host_staging_reason").get<std::string>();
        EXPECT_NE(why.find("pinning is off (capacities.pin_host_memory = false)"), std::string::npos) << why;
    }
    // Pinning on, no staging: the CPU transport's "pinned" memory is reported as pinned, so the counters above
    // do tell the two apart.
    RunOut on = run(Case::group_block, nullptr, true);
    EXPECT_GT(on.json.at("counters").at("pinned_bytes").get<std::uint64_t>(), 0u) << on.json.at("counters").dump();
}

TEST(EnginePinOff, StagingRefusesThePinnedRouteWhenOffAndSaysWhy) {
    auto staging = make_pin_off_staging();
    ASSERT_TRUE(staging);
    auto r = staging->allocate_pinned(4096);
    EXPECT_FALSE(r.value);
    EXPECT_NE(r.reason.find("the pinned route is off (capacities.pin_host_memory = false)"), std::string::npos) << r.reason;
    const auto p = staging->pinned_counters();
    EXPECT_EQ(p.attempts, 1u);
    EXPECT_EQ(p.refusals, 1u);
    EXPECT_EQ(p.successes, 0u);
    EXPECT_EQ(staging->to_json().at("limits").at("pinned_route"), "off");
}
