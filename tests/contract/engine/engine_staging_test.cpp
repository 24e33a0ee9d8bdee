// The engine over HostStaging (host backend: mmap + mlock for the pinned route, mlock of existing ranges for the
// registration route), the CPU transport and the built linear allocator plugin: staged routes stay bitwise equal
// to resident; a refused pinned allocation falls back to pageable memory without touching the registration route;
// registration follows its mode (off: never attempted; bounded: up to the ceiling); the report carries both routes.
//
// RLIMIT_MEMLOCK: the host backend checks it itself (docs/architecture.md, Note [Host staging routes]), so a low
// limit would turn pinned successes into refusals. The fixture raises the soft limit to what the tests lock (a few
// MiB; the hard limit too when the process may) and restores it; it skips, naming the limit, only when the limit
// is below that and cannot be raised (an unprivileged process under a hard limit below 2 MiB). No test's outcome depends on the machine's limit otherwise.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/host_staging.hpp"
#include "ddo/store/weight_store.hpp"
#include "contract/engine/staging_cases.hpp"
#include "contract/engine/engine_test_model.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;
using platform::HostStaging;
using platform::RegistrationMode;
using platform::StagingBackend;
using platform::StagingLimits;
using ddo::testing::staging::any_reason_contains;
using ddo::testing::staging::bitwise_equal;
using ddo::testing::staging::Case;

namespace {

using namespace ddo::testing::engine_model;  // linear(), kShape, store_once(), big_caps()

std::uint64_t group_bytes() { return ModelLayout::build(bench::synthetic_groups(kShape), store_once()).group(0).bytes; }

// The cases (Case), their engine configurations and the counter expectations live in
// contract/engine/staging_cases.hpp, shared with the CUDA counterpart (tests/cuda/engine/engine_staging_cuda_test.cpp).

struct RunOut {
    std::vector<float> out;
    nlohmann::json json;
    std::uint64_t owners = 1;
};

RunOut run(Case k, HostStaging * staging) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    const EngineConfig cfg = ddo::testing::staging::config(k, layout);
    auto tr = make_cpu_transport();
    EngineOptions eo;
    eo.map_file_residents = false;  // the copy path (file -> staging -> pool), which the CUDA transport takes
    eo.read_files_into_destination = false;
    eo.staging = staging;
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr, eo);
    e.begin_phase("denoise");
    RunOut r;
    r.out = bench::run_synthetic(e, kShape, 2);
    r.owners = e.end_phase();
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
    r.json = e.to_json();  // after close: every host buffer and registration is back
    return r;
}

std::unique_ptr<HostStaging> make_staging(StagingLimits limits) {
    std::string reason;
    auto s = ddo::testing::staging::create(StagingBackend::host, limits, &reason);
    EXPECT_TRUE(s) << reason;
    return s;
}

class EngineStaging : public ::testing::Test {
protected:
    // The most the tests lock at once is 4 pinned groups (832 KiB) plus page rounding; 2 MiB leaves a margin and
    // stays under the 8 MiB default, so the limit is raised only on machines with a lower one.
    static constexpr rlim_t kNeed = 2ull << 20;
    void SetUp() override {
        ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved_), 0) << std::strerror(errno);
        if (saved_.rlim_cur != RLIM_INFINITY && saved_.rlim_cur < kNeed) {
            rlimit want = saved_;
            want.rlim_cur = kNeed;
            if (want.rlim_max != RLIM_INFINITY && want.rlim_max < kNeed) want.rlim_max = kNeed;
            if (::setrlimit(RLIMIT_MEMLOCK, &want) != 0) {
                const int err = errno;
                GTEST_SKIP() << "RLIMIT_MEMLOCK is " << saved_.rlim_cur << " bytes (hard " << saved_.rlim_max
                             << ") and cannot be raised to " << kNeed << " (setrlimit: " << std::strerror(err)
                             << "); the host staging backend locks memory with mlock: raise it (ulimit -l)";
            }
            restore_ = true;
        }
        ref_ = run(Case::resident, nullptr).out;
    }
    void TearDown() override {
        if (restore_) ::setrlimit(RLIMIT_MEMLOCK, &saved_);
    }
    rlimit saved_{};
    bool restore_ = false;
    std::vector<float> ref_;
};

}  // namespace

TEST_F(EngineStaging, StagedRoutesAreBitwiseEqualToResident) {
    const std::uint64_t gb = group_bytes();
    for (Case k : {Case::dynamic, Case::disk, Case::group_block}) {
        auto staging = make_staging(StagingLimits{});
        ASSERT_TRUE(staging);
        RunOut o = run(k, staging.get());
        const std::string name = ddo::testing::staging::name(k);
        EXPECT_TRUE(bitwise_equal(o.out, ref_)) << name << " with host staging differs from resident";
        EXPECT_EQ(o.owners, 0u) << name;
        ddo::testing::staging::expect_staged_route_counters(k, o.json, gb);
    }
}

TEST_F(EngineStaging, PinnedLimitTooSmallFallsBackToPageableAndLeavesRegistrationAlone) {
    const std::uint64_t gb = group_bytes();
    for (Case k : {Case::group_block, Case::disk}) {
        StagingLimits limits;
        limits.pinned_limit = 4096;  // below one group: every pinned request is refused
        limits.registration = RegistrationMode::full;
        auto staging = make_staging(limits);
        ASSERT_TRUE(staging);
        RunOut o = run(k, staging.get());
        EXPECT_TRUE(bitwise_equal(o.out, ref_)) << ddo::testing::staging::name(k) << " with pinned fallbacks differs from resident";
        ddo::testing::staging::expect_pinned_fallbacks(k, o.json, gb);
    }
    // A limit of one group: the first pinned copy fits, the other three fall back.
    StagingLimits limits;
    limits.pinned_limit = (gb + 4095) / 4096 * 4096;
    auto staging = make_staging(limits);
    ASSERT_TRUE(staging);
    RunOut o = run(Case::group_block, staging.get());
    EXPECT_TRUE(bitwise_equal(o.out, ref_));
    EXPECT_EQ(o.json["host_staging"]["pinned"]["successes"], 1);
    EXPECT_EQ(o.json["counters"]["pinned_fallbacks"], 3);
    EXPECT_EQ(o.json["counters"]["pinned_bytes"], gb);
    EXPECT_EQ(o.json["host_staging"]["registration"]["attempts"], 0);
}

TEST_F(EngineStaging, RegistrationOffIsNeverAttempted) {
    StagingLimits limits;
    limits.registration = RegistrationMode::off;
    auto staging = make_staging(limits);
    ASSERT_TRUE(staging);
    RunOut o = run(Case::dynamic_pageable, staging.get());
    EXPECT_TRUE(bitwise_equal(o.out, ref_));
    ddo::testing::staging::expect_registration_off(o.json, group_bytes());
}

TEST_F(EngineStaging, BoundedRegistrationStopsAtTheCeiling) {
    const std::uint64_t gb = group_bytes();
    StagingLimits limits;
    limits.registration = RegistrationMode::bounded;
    limits.registration_ceiling = gb + gb / 2;  // one pageable copy fits, a second does not
    auto staging = make_staging(limits);
    ASSERT_TRUE(staging);
    RunOut o = run(Case::dynamic_pageable, staging.get());
    EXPECT_TRUE(bitwise_equal(o.out, ref_));
    const auto & r = o.json.at("host_staging").at("registration");
    EXPECT_EQ(r.at("attempts"), 3) << r.dump();
    EXPECT_EQ(r.at("successes"), 1);
    EXPECT_EQ(r.at("refusals"), 2);
    EXPECT_EQ(r.at("failures"), 0);
    EXPECT_EQ(r.at("bytes_peak"), gb);
    EXPECT_TRUE(any_reason_contains(r.at("reasons"), "registration = bounded: ceiling")) << r.dump();
    EXPECT_EQ(o.json.at("counters").at("registered_bytes"), gb);
    // Registration refusals are not pinned fallbacks; the pinned route served only the 2 staging buffers the
    // resident group is uploaded through.
    EXPECT_EQ(o.json.at("counters").at("pinned_fallbacks"), 0);
    EXPECT_EQ(o.json.at("host_staging").at("pinned").at("attempts"), 2);
    EXPECT_EQ(o.json.at("host_staging").at("pinned").at("successes"), 2);
}

TEST_F(EngineStaging, ReportCarriesBothRoutesOrSaysWhyNot) {
    auto staging = make_staging(StagingLimits{});
    ASSERT_TRUE(staging);
    RunOut o = run(Case::dynamic, staging.get());
    const auto & hs = o.json.at("host_staging");
    EXPECT_TRUE(o.json.at("host_staging_reason").is_null());
    EXPECT_EQ(hs.at("backend"), "host");
    for (const char * route : {"pinned", "registration"})
        for (const char * f : {"attempts", "successes", "failures", "refusals", "bytes_current", "bytes_peak", "bytes_total", "reasons"})
            EXPECT_TRUE(hs.at(route).contains(f)) << route << "." << f;
    for (const char * f : {"pinned_limit", "registration", "registration_ceiling", "ram_headroom"})
        EXPECT_TRUE(hs.at("limits").contains(f)) << f;
    for (const char * f : {"pinned_fallbacks", "pinned_fallback_bytes", "pinned_fallback_reasons", "registered_bytes", "staging_pinned_bytes"})
        EXPECT_TRUE(o.json.at("counters").contains(f)) << f;

    RunOut none = run(Case::dynamic, nullptr);
    EXPECT_TRUE(none.json.at("host_staging").is_null());
    EXPECT_NE(none.json.at("host_staging_reason").get<std::string>().find("no host staging"), std::string::npos);
    EXPECT_EQ(none.json.at("counters").at("pinned_fallbacks"), 0);
    EXPECT_TRUE(bitwise_equal(none.out, ref_));
}

namespace {
// A host-memory transport that claims device memory: the host (mlock) staging backend does not page-lock for it.
class DeviceClaimingTransport final : public Transport {
public:
    std::unique_ptr<Transport> inner = make_cpu_transport();
    std::string name() const override { return "cuda"; }
    bool device_is_host() const override { return false; }
    int device_ordinal() const override { return 0; }
    FencePtr submit(CopyJob job) override { return inner->submit(std::move(job)); }
    double compute_wait(Fence & f) override { return inner->compute_wait(f); }
    FencePtr compute_fence() override { return inner->compute_fence(); }
    void drain() override { inner->drain(); }
    TransportStats stats() const override { return inner->stats(); }
    HostBuffer allocate_host(std::uint64_t b, bool p) override { return inner->allocate_host(b, p); }
    Capacities observe_device() const override { return inner->observe_device(); }
};
}  // namespace

TEST(EngineStagingConfig, StagingBackendMustBeTheTransports) {  // locks nothing: no memlock fixture
    auto staging = make_staging(StagingLimits{});
    ASSERT_TRUE(staging);
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.route = Route::group_block;
    DeviceClaimingTransport tr;
    EngineOptions eo;
    eo.map_file_residents = false;  // the copy path (file -> staging -> pool), which the CUDA transport takes
    eo.read_files_into_destination = false;
    eo.staging = staging.get();
    try {
        Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), tr, eo);
        FAIL() << "a host staging backend was accepted for a device transport";
    } catch (const UsageError & err) {
        EXPECT_NE(std::string(err.what()).find("use backend 'cuda'"), std::string::npos) << err.what();
    }
    EXPECT_EQ(staging->pinned_counters().attempts, 0u);
}

// The allocator plugin's own options travel to pool_create as ddo_kv; linear has none and refuses any (its message
// goes to the host's set_error); the engine's error names the options and the preset table.
TEST(EngineAllocatorOptions, ReachThePluginWhichChecksThem) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.route = Route::group_block;
    auto tr = make_cpu_transport();
    EngineOptions eo;
    eo.map_file_residents = false;  // the copy path (file -> staging -> pool), which the CUDA transport takes
    eo.read_files_into_destination = false;
    eo.allocator_options = {{"cache_released", "false"}};
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr, eo);
    try {
        e.begin_phase("p");
        FAIL() << "linear accepted a pool option";
    } catch (const RuntimeError & err) {
        EXPECT_NE(std::string(err.what()).find("pool_create answered INVALID_ARGUMENT (check its pool options, preset "
                                               "plugin.linear.*: cache_released)"),
                  std::string::npos)
            << err.what();
    }
}
