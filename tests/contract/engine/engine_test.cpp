// The engine over the built linear allocator plugin and the CPU transport: bitwise-equal routes,
// prefetch order, lease/fence ordering, close refusal, zero outstanding owners.
#include <gtest/gtest.h>

#include <condition_variable>
#include <dlfcn.h>
#include <cstring>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "ddo/engine/allocator_pool.hpp"
#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/store/weight_store.hpp"
#include "contract/engine/engine_test_model.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;

namespace {

using namespace ddo::testing::engine_model;  // linear(), kShape, store_once(), big_caps()

struct RunOut {
    std::vector<float> out;
    nlohmann::json json;
    std::uint64_t owners = 1;
};

RunOut run(Route route, Granularity g, int steps = 2, bool map_residents = true) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once(), g);
    EngineConfig cfg;
    cfg.route = route;
    cfg.ram_headroom = 0;
    cfg.device_headroom = 0;
    if (route == Route::dynamic) { cfg.resident_budget = layout.group(0).bytes; cfg.pinned_budget = layout.group(1).bytes; }
    auto tr = make_cpu_transport();
    EngineOptions eo;
    eo.map_file_residents = map_residents;
    eo.read_files_into_destination = map_residents;  // false: the staging path the CUDA transport takes
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr, eo);
    e.begin_phase("denoise");
    RunOut r;
    r.out = bench::run_synthetic(e, kShape, steps);
    r.owners = e.end_phase();
    r.json = e.to_json();
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
    return r;
}

class ManualFence final : public Fence {
public:
    bool ready() const override { return done_.load(); }
    void host_wait() override {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return done_.load(); });
    }
    void signal() {
        { std::lock_guard lk(m_); done_ = true; }
        cv_.notify_all();
    }
private:
    std::mutex m_;
    std::condition_variable cv_;
    std::atomic<bool> done_{false};
};

// CPU transport whose compute fences complete only when the test says so (like a GPU still reading).
class HeldComputeTransport final : public Transport {
public:
    std::unique_ptr<Transport> inner = make_cpu_transport();
    std::vector<std::shared_ptr<ManualFence>> fences;
    std::string name() const override { return "held"; }
    bool device_is_host() const override { return true; }
    int device_ordinal() const override { return -1; }
    FencePtr submit(CopyJob job) override { return inner->submit(std::move(job)); }
    double compute_wait(Fence & f) override { return inner->compute_wait(f); }
    bool hold = true;
    FencePtr compute_fence() override {
        if (!hold) return ready_fence();
        fences.push_back(std::make_shared<ManualFence>());
        return fences.back();
    }
    void drain() override { inner->drain(); }
    TransportStats stats() const override { return inner->stats(); }
    HostBuffer allocate_host(std::uint64_t b, bool p) override { return inner->allocate_host(b, p); }
    Capacities observe_device() const override { return inner->observe_device(); }
};

}  // namespace

TEST(EngineRoutes, EveryStreamedRouteIsBitwiseEqualToResident) {
    RunOut ref = run(Route::resident, Granularity::block);
    EXPECT_EQ(ref.owners, 0u);
    struct Case { const char * name; Route r; Granularity g; };
    for (Case c : {Case{"component", Route::component, Granularity::block}, Case{"group_block", Route::group_block, Granularity::block},
                   Case{"group_leaf", Route::group_leaf, Granularity::leaf}, Case{"dynamic", Route::dynamic, Granularity::block},
                   Case{"dynamic_half", Route::dynamic, Granularity::half}, Case{"disk", Route::disk, Granularity::block}}) {
        RunOut o = run(c.r, c.g);
        ASSERT_EQ(o.out.size(), ref.out.size()) << c.name;
        EXPECT_EQ(std::memcmp(o.out.data(), ref.out.data(), ref.out.size() * sizeof(float)), 0) << c.name << " differs from resident";
        EXPECT_EQ(o.owners, 0u) << c.name;
        EXPECT_EQ(o.json["counters"]["outstanding_owners"], 0) << c.name;
        EXPECT_EQ(o.json["counters"]["failures"], 0) << c.name;
    }
}

// Note [Mapped residents]: on a host transport the resident groups are the file mapping's pages, read in place (no
// pool buffer, no copy, no staging), and the result is bitwise the copied one.
TEST(EngineRoutes, ResidentsOnAHostTransportAreReadInPlaceFromTheMapping) {
    const RunOut mapped = run(Route::resident, Granularity::block), copied = run(Route::resident, Granularity::block, 2, false);
    ASSERT_EQ(mapped.out.size(), copied.out.size());
    EXPECT_EQ(std::memcmp(mapped.out.data(), copied.out.data(), copied.out.size() * sizeof(float)), 0);
    const auto & m = mapped.json["counters"];
    const auto & c = copied.json["counters"];
    EXPECT_EQ(m["mapped_groups"], kShape.blocks) << m.dump();
    EXPECT_GT(m["mapped_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(m["bytes_moved"]["resident"], 0) << "nothing is copied";
    EXPECT_EQ(m["device_bytes"], 0) << "no pool buffer for a mapped group";
    EXPECT_EQ(m["staging_bytes"], 0) << "no staging for a mapped group";
    EXPECT_EQ(c["mapped_groups"], 0);
    EXPECT_GT(c["bytes_moved"]["resident"].get<std::uint64_t>(), 0u);
    // The copy path keeps its staging only until the residents are in: nothing streams afterwards.
    EXPECT_GT(c["staging_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(c["staging_released_bytes"], c["staging_bytes"]) << c.dump();

    // A lease of a mapped group points into the source's mapping.
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once(), Granularity::block);
    EngineConfig cfg;
    cfg.route = Route::resident;
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("denoise");
    {
        Lease l = e.acquire(0);
        ASSERT_TRUE(l.mapped());
        EXPECT_EQ(l.data(), nullptr);
        const auto & slice = layout.group(0).tensors.front();
        EXPECT_EQ(l.view(slice.name()).data, store_once().mapped(*slice.info));
    }
    EXPECT_EQ(e.end_phase(), 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

// The figures a benchmark's bound column needs are in every report (issue 13): a plan that streams measures its
// link once (pinned and pageable, into the first slot) and says how fast its uploads went; a plan that streams
// nothing says why there is neither, instead of a 0.
TEST(EngineRoutes, ReportsCarryTheLinkBandwidthAndTheAchievedUploadRate) {
    const RunOut dynamic = run(Route::dynamic, Granularity::block), resident = run(Route::resident, Granularity::block);
    const auto & d = dynamic.json["counters"];
    ASSERT_TRUE(d["link"].is_object()) << d.dump();
    EXPECT_GT(d["link"]["bytes"].get<std::uint64_t>(), 0u);
    EXPECT_GT(d["link"]["pinned_gb_per_s"].get<double>(), 0.0);
    EXPECT_GT(d["link"]["pageable_gb_per_s"].get<double>(), 0.0);
    EXPECT_EQ(d["link"]["clock"], "host wall");
    EXPECT_TRUE(d["link"]["reason"].is_null());
    EXPECT_GT(d["upload_gb_per_s"].get<double>(), 0.0) << d.dump();
    EXPECT_EQ(d["upload_gb_per_s_clock"], "host wall (copy worker time copying and reading)");
    const auto & r = resident.json["counters"];
    EXPECT_TRUE(r["link"].is_null());
    EXPECT_EQ(r["link_reason"], "not measured: the plan streams nothing (no slots)");
    EXPECT_TRUE(r["upload_gb_per_s"].is_null());
    EXPECT_EQ(r["upload_gb_per_s_reason"], "nothing was uploaded: the residents are read in place from the file mapping");
}

// The disk route on a host transport reads each group from the file straight into its slot: one copy, no staging
// buffers (their memory was a second copy of the largest group per staging slot); bitwise the staged path.
TEST(EngineRoutes, DiskRouteOnAHostTransportReadsStraightIntoTheSlot) {
    const RunOut direct = run(Route::disk, Granularity::block), staged = run(Route::disk, Granularity::block, 2, false);
    const RunOut resident = run(Route::resident, Granularity::block);
    ASSERT_EQ(direct.out.size(), resident.out.size());
    EXPECT_EQ(std::memcmp(direct.out.data(), resident.out.data(), resident.out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(direct.out.data(), staged.out.data(), staged.out.size() * sizeof(float)), 0);
    const auto & d = direct.json["counters"];
    EXPECT_EQ(d["staging_bytes"], 0) << d.dump();
    EXPECT_GT(d["bytes_moved"]["file"].get<std::uint64_t>(), 0u);
    EXPECT_GT(staged.json["counters"]["staging_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(direct.owners, 0u);
}

TEST(EngineRoutes, DynamicMixesResidentPinnedPageable) {
    RunOut o = run(Route::dynamic, Granularity::block);
    const auto & groups = o.json["plan"]["groups"];
    EXPECT_EQ(groups[0]["residency"], "resident");
    EXPECT_EQ(groups[1]["residency"], "pinned");
    EXPECT_EQ(groups[2]["residency"], "pageable");
    const auto & c = o.json["counters"];
    EXPECT_GT(c["bytes_moved"]["pinned"].get<std::uint64_t>(), 0u);
    EXPECT_GT(c["bytes_moved"]["pageable"].get<std::uint64_t>(), 0u);
    EXPECT_TRUE(c["upload_event_s"].is_null());
    EXPECT_FALSE(c["upload_event_s_reason"].get<std::string>().empty());
    EXPECT_TRUE(c["stall_s"].is_number());
}

TEST(EngineSlots, PrefetchFollowsExecutionOrderAcrossTheStepBoundary) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.resident_budget = 0;
    cfg.pinned_budget = 0;
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("p");
    for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < layout.size(); ++g) e.acquire(g);  // lease released at once
    EXPECT_EQ(e.upload_log(), (std::vector<std::size_t>{0, 1, 2, 3, 0, 1, 2, 3, 0}));
    auto c = e.counters();
    EXPECT_EQ(c.misses, 1u);
    EXPECT_EQ(c.hits, 7u);
    EXPECT_EQ(e.end_phase(), 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

TEST(EngineSlots, CloseRefusedWhileLeasedAndOwnersCounted) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.route = Route::group_block;
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("p");
    {
        Lease l = e.acquire(0);
        EXPECT_EQ(e.close(), DDO_STATUS_BUSY);
        EXPECT_EQ(e.end_phase(), 1u);  // the lease is an outstanding owner
        EXPECT_THROW(l.view("blocks.1.attn.to_q.weight"), UsageError);
        EXPECT_EQ(l.view("blocks.0.attn.to_q.weight").nbytes(), 64u * 64u * 4u);
    }
    e.begin_phase("p2");
    EXPECT_EQ(e.end_phase(), 0u);
    auto c = e.counters();
    EXPECT_EQ(c.close_refusals, 1u);
    ASSERT_EQ(c.phase_end_owners.size(), 2u);
    EXPECT_EQ(c.phase_end_owners[0].second, 1u);
    EXPECT_EQ(c.phase_end_owners[1].second, 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

TEST(EngineSlots, TwoLeasesExhaustTwoSlots) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.route = Route::group_block;
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("p");
    Lease a = e.acquire(0), b = e.acquire(1);
    EXPECT_THROW(e.acquire(2), RuntimeError);
    a.release();
    b.release();
    EXPECT_NO_THROW(e.acquire(2));
    EXPECT_EQ(e.end_phase(), 0u);
}

TEST(EngineSlots, SlotReuseWaitsForTheReadersFence) {
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    EngineConfig cfg;
    cfg.route = Route::group_block;
    HeldComputeTransport tr;
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), tr);
    e.begin_phase("p");
    e.acquire(0).release();          // slot A read by "compute" fence F0 (held)
    Lease l1 = e.acquire(1);         // prefetches group 2 into slot A: must wait for F0
    l1.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // The upload of group 2 has not run: its slot's reader fence is still held.
    EXPECT_EQ(e.upload_log().back(), 2u);
    EXPECT_EQ(tr.stats().jobs, 2u) << "the upload into a slot ran before its readers' fence completed";
    EXPECT_EQ(e.close(), DDO_STATUS_BUSY);  // an upload is pending
    for (auto & f : tr.fences) f->signal();
    tr.hold = false;
    Lease l2 = e.acquire(2);
    EXPECT_EQ(std::memcmp(l2.view("blocks.2.mlp.up.weight").data, l2.view("blocks.2.mlp.up.weight").data, 4), 0);
    l2.release();
    for (auto & f : tr.fences) f->signal();
    EXPECT_EQ(e.end_phase(), 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

TEST(LinearAllocator, RefusesReleaseAndCloseOfLeasedBuffer) {
    ddo_alloc_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.backend = DDO_ALLOC_BACKEND_HOST;
    AllocatorPool pool(linear(), cfg);
    PoolBuffer b = pool.reserve(1000, 4096);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 4096, 0u);
    EXPECT_GE(b.bytes(), 1000u);
    b.set_flags(DDO_ALLOC_FLAG_PENDING);
    EXPECT_EQ(pool.close(), DDO_STATUS_BUSY);
    b.set_flags(0);
    EXPECT_EQ(b.release(), DDO_STATUS_OK);
    EXPECT_EQ(pool.stats().live_buffers, 0u);
    EXPECT_EQ(pool.close(), DDO_STATUS_OK);
}

TEST(LinearAllocator, CudaBackendWithoutDriverIsUnavailable) {
    if (::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr || fs::exists("/dev/nvidia0"))
        GTEST_SKIP() << "a CUDA driver is present; this checks the no-driver answer";
    ddo_alloc_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.backend = DDO_ALLOC_BACKEND_CUDA;
    ddo_alloc_pool * p = nullptr;
    EXPECT_EQ(linear()->pool_create(&cfg, &p), DDO_STATUS_UNAVAILABLE);
}
