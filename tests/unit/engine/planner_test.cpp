// Planner decisions under budgets (table-driven).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ddo/engine/planner.hpp"
#include "ddo/error.hpp"
#include "unit/engine/fake_source.hpp"

using namespace ddo::engine;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;

struct Fixture {
    FakeSource src;
    ModelLayout layout;
    explicit Fixture(int n = 6) {
        std::vector<GroupDecl> d;
        for (int i = 0; i < n; ++i) {
            std::string name = "b" + std::to_string(i);
            src.add(name, 100 * MiB);
            d.push_back({name, {name}, {}});
        }
        layout = ModelLayout::build(d, src);
    }
};

Capacities caps(std::optional<std::uint64_t> dev, std::optional<std::uint64_t> ram) {
    Capacities c;
    c.device_free = dev;
    c.device_total = dev;
    c.mem_available = ram;
    return c;
}

std::string residencies(const Plan & p) {
    std::string s;
    for (const auto & g : p.groups) s += std::string(to_string(g.residency)).substr(0, 2) + " ";
    return s;
}

struct Row {
    const char * name;
    Route route;
    std::optional<std::uint64_t> device_budget, resident_budget, pinned_budget;
    std::optional<std::uint64_t> device_free, ram;
    SelectionPolicy policy;
    const char * expect;  // per group: re pi pa fi
};

const Row kRows[] = {
    {"resident_route", Route::resident, {}, {}, {}, 8000 * MiB, 8000 * MiB, SelectionPolicy::first, "re re re re re re "},
    {"dynamic_fits_all", Route::dynamic, {}, {}, {}, 8000 * MiB, 8000 * MiB, SelectionPolicy::first, "re re re re re re "},
    {"dynamic_first_3", Route::dynamic, 500 * MiB, {}, {}, {}, 8000 * MiB, SelectionPolicy::first, "re re re pi pi pi "},
    {"dynamic_spread_2", Route::dynamic, 400 * MiB, {}, {}, {}, 8000 * MiB, SelectionPolicy::spread, "re pi pi pi pi re "},
    {"dynamic_resident_budget", Route::dynamic, 8000 * MiB, 100 * MiB, {}, {}, 8000 * MiB, SelectionPolicy::first, "re pi pi pi pi pi "},
    {"dynamic_unknown_device", Route::dynamic, {}, 300 * MiB, {}, {}, 8000 * MiB, SelectionPolicy::first, "pi pi pi pi pi pi "},
    {"pinned_partial", Route::dynamic, 300 * MiB, {}, 200 * MiB, {}, 8000 * MiB, SelectionPolicy::first, "re pi pi pa pa pa "},
    {"pinned_snap_95", Route::dynamic, 200 * MiB, {}, 570 * MiB, {}, 8000 * MiB, SelectionPolicy::first, "pi pi pi pi pi pi "},
    {"ram_short_file", Route::dynamic, 200 * MiB, {}, 0, {}, 2048 * MiB + 250 * MiB, SelectionPolicy::first, "pa pa fi fi fi fi "},
    {"ram_unknown_file", Route::dynamic, 200 * MiB, {}, {}, {}, {}, SelectionPolicy::first, "fi fi fi fi fi fi "},
    {"group_block", Route::group_block, {}, {}, {}, 8000 * MiB, 8000 * MiB, SelectionPolicy::first, "pi pi pi pi pi pi "},
    {"disk", Route::disk, {}, {}, {}, 8000 * MiB, 8000 * MiB, SelectionPolicy::first, "fi fi fi fi fi fi "},
};

class PlannerTable : public ::testing::TestWithParam<Row> {};

}  // namespace

TEST_P(PlannerTable, Decides) {
    const Row & r = GetParam();
    Fixture f;
    EngineConfig cfg;
    cfg.route = r.route;
    cfg.device_budget = r.device_budget;
    cfg.resident_budget = r.resident_budget;
    cfg.pinned_budget = r.pinned_budget;
    cfg.policy = r.policy;
    cfg.device_headroom = 0;
    Plan p = plan_residency(f.layout, cfg, caps(r.device_free, r.ram));
    EXPECT_EQ(residencies(p), r.expect) << p.to_json().dump(2);
    for (const auto & g : p.groups) EXPECT_FALSE(g.reason.empty()) << g.name;
    auto j = p.to_json();
    EXPECT_EQ(j["groups"].size(), 6u);
    EXPECT_TRUE(j["groups"][0].contains("reason"));
    if (!p.streamed().empty()) {
        EXPECT_GE(p.slots, 2u);
        EXPECT_EQ(p.prefetch_depth, p.slots - 1);
        EXPECT_EQ(p.slot_bytes, 100 * MiB);
    }
}

INSTANTIATE_TEST_SUITE_P(Budgets, PlannerTable, ::testing::ValuesIn(kRows),
                         [](const auto & info) { return std::string(info.param.name); });

TEST(Planner, SnapFlagAndReason) {
    Fixture f;
    EngineConfig cfg;
    cfg.device_budget = 200 * MiB;
    cfg.pinned_budget = 570 * MiB;
    Plan p = plan_residency(f.layout, cfg, caps({}, 8000 * MiB));
    EXPECT_TRUE(p.pin_snapped_to_full);
    EXPECT_NE(p.groups[0].reason.find("snapped"), std::string::npos);
}

TEST(Planner, RefusesImpossibleConfigurations) {
    Fixture f;
    EngineConfig cfg;
    cfg.slots = 1;
    cfg.device_budget = 200 * MiB;
    EXPECT_THROW(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)), ddo::UsageError);
    cfg.slots = 2;
    cfg.device_budget = 150 * MiB;  // below two slots
    EXPECT_THROW(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)), ddo::UsageError);
    cfg.route = Route::resident;
    cfg.device_budget = 300 * MiB;
    EXPECT_THROW(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)), ddo::UsageError);
}

// capacities.prefetch_depth / components.<c>.use_stream reach the plan: at most slots - 1, 0 = synchronous.
TEST(Planner, PrefetchDepthIsCappedBySlotsAndZeroIsSynchronous) {
    Fixture f;
    EngineConfig cfg;
    cfg.route = Route::disk;
    cfg.slots = 3;
    EXPECT_EQ(plan_residency(f.layout, cfg, caps(4096 * MiB, 64000 * MiB)).prefetch_depth, 2u);  // default: slots - 1
    cfg.prefetch_depth = 1;
    EXPECT_EQ(plan_residency(f.layout, cfg, caps(4096 * MiB, 64000 * MiB)).prefetch_depth, 1u);
    cfg.prefetch_depth = 0;
    const Plan p = plan_residency(f.layout, cfg, caps(4096 * MiB, 64000 * MiB));
    EXPECT_EQ(p.prefetch_depth, 0u);
    bool noted = false;
    for (const auto & n : p.notes) noted |= n.find("uploaded when it is acquired") != std::string::npos;
    EXPECT_TRUE(noted) << nlohmann::json(p.notes).dump();
    cfg.prefetch_depth = 9;  // more than the slots allow: the slots bound it
    EXPECT_EQ(plan_residency(f.layout, cfg, caps(4096 * MiB, 64000 * MiB)).prefetch_depth, 2u);
}

// Note [Converted residents]: resident_bytes budgets residents at the size their caller converts them to; slots keep
// the layout's bytes.
TEST(Planner, ResidentBytesBudgetResidentsAtTheirConvertedSize) {
    Fixture f;  // 6 groups of 100 MiB
    EngineConfig cfg;
    cfg.route = Route::dynamic;
    cfg.device_budget = 500 * MiB;  // 2 slots of 100 MiB + 300 MiB of residents
    EXPECT_EQ(residencies(plan_residency(f.layout, cfg, caps({}, 8000 * MiB))), "re re re pi pi pi ");
    cfg.resident_bytes.assign(6, 200 * MiB);  // converted to twice the width: 1 of them fits the 300 MiB
    const Plan p = plan_residency(f.layout, cfg, caps({}, 8000 * MiB));
    EXPECT_EQ(residencies(p), "re pi pi pi pi pi ");
    EXPECT_EQ(p.resident_bytes, 200 * MiB);
    EXPECT_EQ(p.slot_bytes, 100 * MiB);
    cfg.route = Route::resident;  // the whole component at 1200 MiB does not fit 500 MiB
    EXPECT_THROW(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)), ddo::UsageError);
    cfg.device_budget = 1200 * MiB;
    EXPECT_EQ(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)).resident_bytes, 1200 * MiB);
    cfg.resident_bytes.assign(5, 200 * MiB);
    EXPECT_THROW(plan_residency(f.layout, cfg, caps({}, 8000 * MiB)), ddo::UsageError);
}

// Note [Step caching]: the blocks a step cache runs on every step are kept resident before the policy picks, each
// when it fits; the rest of the budget goes by the policy as before.
TEST(Planner, ResidentFirstGroupsComeBeforeThePolicy) {
    Fixture f;  // 6 groups of 100 MiB
    EngineConfig cfg;
    cfg.route = Route::dynamic;
    cfg.device_budget = 400 * MiB;  // 2 slots + 200 MiB of residents
    cfg.device_headroom = 0;
    cfg.policy = SelectionPolicy::spread;
    EXPECT_EQ(residencies(plan_residency(f.layout, cfg, caps({}, 8000 * MiB))), "re pi pi pi pi re ");
    cfg.resident_first = {2};
    const Plan p = plan_residency(f.layout, cfg, caps({}, 8000 * MiB));
    EXPECT_EQ(residencies(p), "re pi re pi pi pi ");
    EXPECT_NE(p.groups[2].reason.find("step cache"), std::string::npos) << p.groups[2].reason;
    EXPECT_NE(p.groups[0].reason.find("policy spread"), std::string::npos) << p.groups[0].reason;
    cfg.resident_first = {4, 2, 1};  // in order, each while it fits: 4 and 2
    EXPECT_EQ(residencies(plan_residency(f.layout, cfg, caps({}, 8000 * MiB))), "pi pi re pi re pi ");
    cfg.resident_first = {9};  // out of range: ignored
    EXPECT_EQ(residencies(plan_residency(f.layout, cfg, caps({}, 8000 * MiB))), "re pi pi pi pi re ");
}
