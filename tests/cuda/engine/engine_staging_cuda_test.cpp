// The engine staging contract on CUDA (label cuda): the engine over the CUDA transport with a CUDA-backend
// HostStaging (pinned route: cuMemHostAlloc; registration route: cuMemHostRegister) and the built linear allocator
// plugin. The counterpart of tests/contract/engine/engine_staging_test.cpp (host backend, CPU transport); the cases
// and the counter expectations are shared (contract/engine/staging_cases.hpp).
//
// What is compared: the bytes of every tensor, copied back from the device through the lease's views (on the
// compute stream, after the upload's event), for every group over two steps; each staged route must equal the
// resident route (without staging), and the resident route must equal the checkpoint's bytes.
// What the transport is told: a recording wrapper around the CUDA transport keeps each CopyJob's source and
// host_locked. host_locked = true: the transport copies directly from the page-locked memory (either route);
// false: through its pinned bounce chunks (cuda_transport.cpp, copy_pageable). The transport has no counter of
// its own for the bounce path, so the jobs are the observable.
//
// Without a usable device every test is skipped with cuda_available's reason ("no CUDA device: ..."), never passed.
// With one, a CUDA HostStaging that cannot be created is a failure (with its reason), not a skip.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/host_staging.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "ddo/torch/tensor_views.hpp"
#include "contract/engine/staging_cases.hpp"
#include "cuda/engine/cuda_engine_support.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;
using platform::HostStaging;
using platform::RegistrationMode;
using platform::StagingBackend;
using platform::StagingLimits;
using ddo::testing::cuda::linear;
using ddo::testing::staging::Case;
namespace cases = ddo::testing::staging;

namespace {

// Width 768: one group is ~31 MB, larger than the transport's 16 MiB bounce chunks, so an unlocked source goes
// through more than one chunk and the chunk ring is reused within and across groups.
const bench::SyntheticShape kShape{4, 768, 3, 16};

const store::WeightStore & store_once() {
    static store::WeightStore ws = [] {
        fs::path p = fs::temp_directory_path() / ("ddo_engine_staging_cuda_" + std::to_string(::getpid()) + ".safetensors");
        bench::write_synthetic_checkpoint(p, kShape);
        return store::WeightStore::open_file(p);
    }();
    return ws;
}

const ModelLayout & layout_once() {
    static const ModelLayout layout = ModelLayout::build(bench::synthetic_groups(kShape), store_once());
    return layout;
}

std::uint64_t group_bytes() { return layout_once().group(0).bytes; }

// The CUDA transport, recording what the engine tells it about each copy's source.
class RecordingTransport final : public Transport {
public:
    struct Job {
        std::size_t group = 0;
        Residency source = Residency::pageable;  // file: a staging buffer (resident upload or disk route)
        bool host_locked = false;
    };
    explicit RecordingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

    std::string name() const override { return inner_->name(); }
    bool device_is_host() const override { return inner_->device_is_host(); }
    int device_ordinal() const override { return inner_->device_ordinal(); }
    FencePtr submit(CopyJob job) override {
        {
            std::lock_guard lk(m_);
            jobs_.push_back(Job{job.group, job.source, job.host_locked});
        }
        return inner_->submit(std::move(job));
    }
    double compute_wait(Fence & f) override { return inner_->compute_wait(f); }
    FencePtr compute_fence() override { return inner_->compute_fence(); }
    void drain() override { inner_->drain(); }
    TransportStats stats() const override { return inner_->stats(); }
    HostBuffer allocate_host(std::uint64_t b, bool p) override { return inner_->allocate_host(b, p); }
    Capacities observe_device() const override { return inner_->observe_device(); }

    std::vector<Job> jobs() const {
        std::lock_guard lk(m_);
        return jobs_;
    }

private:
    std::unique_ptr<Transport> inner_;
    mutable std::mutex m_;
    std::vector<Job> jobs_;
};

struct JobCount {
    std::uint64_t locked = 0, unlocked = 0;
};

JobCount count(const std::vector<RecordingTransport::Job> & jobs, Residency source) {
    JobCount n;
    for (const auto & j : jobs)
        if (j.source == source) ++(j.host_locked ? n.locked : n.unlocked);
    return n;
}

struct RunOut {
    std::vector<unsigned char> bytes;  // every tensor of every group, two steps, in acquisition order
    nlohmann::json json;               // Engine::to_json() after close
    std::uint64_t owners = 1;
    std::vector<RecordingTransport::Job> jobs;
};

void append(std::vector<unsigned char> & out, const void * p, std::size_t n) {
    const auto * b = static_cast<const unsigned char *>(p);
    out.insert(out.end(), b, b + n);
}

RunOut run(Case k, HostStaging * staging) {
    const ModelLayout & layout = layout_once();
    RecordingTransport tr(ddo::torch::make_cuda_transport(0));
    EngineOptions eo;
    eo.staging = staging;
    Engine e(layout, plan_residency(layout, cases::config(k, layout), tr.observe_device()), linear(), tr, eo);
    e.begin_phase("check");
    RunOut r;
    for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < layout.size(); ++g) {
            Lease l = e.acquire(g);
            const auto views = ddo::torch::tensor_views(l);
            for (const auto & s : layout.group(g).tensors) {
                const at::Tensor & t = views.at(s.name());
                EXPECT_TRUE(t.is_cuda()) << cases::name(k) << " " << s.name();
                const at::Tensor got = t.cpu().contiguous();  // on the compute stream, after the upload's event
                EXPECT_EQ(static_cast<std::uint64_t>(got.nbytes()), s.nbytes) << s.name();
                append(r.bytes, got.data_ptr(), static_cast<std::size_t>(got.nbytes()));
            }
            l.release();
        }
    r.owners = e.end_phase();
    EXPECT_EQ(e.close(), DDO_STATUS_OK) << cases::name(k);
    r.json = e.to_json();  // after close: every host buffer and registration is back
    r.jobs = tr.jobs();
    return r;
}

// What the checkpoint holds, in run()'s order.
std::vector<unsigned char> file_bytes() {
    const ModelLayout & layout = layout_once();
    std::vector<unsigned char> out;
    for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < layout.size(); ++g)
            for (const auto & s : layout.group(g).tensors) {
                std::vector<unsigned char> b(s.nbytes);
                store_once().read_tensor(*s.info, b.data(), store::ReadMode::pread);
                out.insert(out.end(), b.begin(), b.end());
            }
    return out;
}

class EngineStagingCuda : public ::testing::Test {
protected:
    void SetUp() override {
        DDO_REQUIRE_CUDA();
        static const std::vector<unsigned char> ref = [] {
            RunOut o = run(Case::resident, nullptr);
            EXPECT_EQ(o.owners, 0u);
            EXPECT_TRUE(o.json.at("host_staging").is_null());
            return o.bytes;
        }();
        ASSERT_FALSE(ref.empty());
        ASSERT_TRUE(cases::bitwise_equal(ref, file_bytes())) << "the resident route's device payloads differ from the checkpoint";
        ref_ = &ref;
    }

    // A CUDA-backend staging; a device is usable here (SetUp), so failing to create one is a failure.
    std::unique_ptr<HostStaging> cuda_staging(StagingLimits limits) {
        std::string reason;
        auto s = cases::create(StagingBackend::cuda, limits, &reason);
        EXPECT_TRUE(s) << "CUDA host staging with a usable device: " << reason;
        if (s) {
            EXPECT_EQ(s->backend(), StagingBackend::cuda);
        }
        return s;
    }

    const std::vector<unsigned char> & ref() const { return *ref_; }

private:
    const std::vector<unsigned char> * ref_ = nullptr;
};

}  // namespace

// (a) Every streamed route with default limits (registration full): dynamic (one pinned copy from cuMemHostAlloc,
// two pageable copies registered with cuMemHostRegister), dynamic with every copy pageable and registered, disk
// (pinned staging buffers), group_block (every copy pinned). Equal to resident; successes on the expected route;
// every copy handed to the transport as page-locked (direct copy, no bounce).
TEST_F(EngineStagingCuda, StagedRoutesAreBitwiseEqualToResident) {
    const std::uint64_t gb = group_bytes();
    for (Case k : {Case::dynamic, Case::dynamic_pageable, Case::disk, Case::group_block}) {
        auto staging = cuda_staging(StagingLimits{});
        ASSERT_TRUE(staging);
        RunOut o = run(k, staging.get());
        const std::string name = cases::name(k);
        EXPECT_TRUE(cases::bitwise_equal(o.bytes, ref())) << name << " with CUDA host staging differs from resident";
        EXPECT_EQ(o.owners, 0u) << name;
        EXPECT_EQ(o.json.at("host_staging").at("backend"), "cuda") << name;
        EXPECT_EQ(o.json.at("counters").at("transport"), "cuda") << name;
        cases::expect_staged_route_counters(k, o.json, gb);
        const JobCount pinned = count(o.jobs, Residency::pinned), pageable = count(o.jobs, Residency::pageable),
                       file = count(o.jobs, Residency::file);
        EXPECT_EQ(pinned.unlocked + pageable.unlocked + file.unlocked, 0u) << name << ": a copy went through the bounce chunks";
        if (k == Case::dynamic) {
            EXPECT_GT(pinned.locked, 0u);
            EXPECT_GT(pageable.locked, 0u) << "registered pageable copies";
        } else if (k == Case::dynamic_pageable) {
            EXPECT_GT(pageable.locked, 0u);
        } else if (k == Case::disk) {
            EXPECT_GT(file.locked, 0u) << "the disk route streams from pinned staging";
        } else {
            EXPECT_GT(pinned.locked, 0u);
        }
    }
}

// (b) Registration off: never attempted; the pageable copies stay pageable and go through the transport's bounce
// chunks (the jobs say unlocked); still equal. The resident group's staging buffers are pinned (locked).
TEST_F(EngineStagingCuda, RegistrationOffIsNeverAttemptedAndCopiesBounce) {
    StagingLimits limits;
    limits.registration = RegistrationMode::off;
    auto staging = cuda_staging(limits);
    ASSERT_TRUE(staging);
    RunOut o = run(Case::dynamic_pageable, staging.get());
    EXPECT_TRUE(cases::bitwise_equal(o.bytes, ref())) << "pageable copies through the bounce chunks differ from resident";
    EXPECT_EQ(o.owners, 0u);
    cases::expect_registration_off(o.json, group_bytes());
    EXPECT_EQ(staging->registration_counters().attempts, 0u);
    const JobCount pageable = count(o.jobs, Residency::pageable), file = count(o.jobs, Residency::file);
    EXPECT_GT(pageable.unlocked, 0u);
    EXPECT_EQ(pageable.locked, 0u) << "a pageable copy was handed over as page-locked with registration off";
    EXPECT_GT(file.locked, 0u);
    EXPECT_EQ(file.unlocked, 0u);
}

// (c) A pinned limit below one staging buffer / host copy: every pinned request is refused and falls back to
// pageable memory (counted by the engine), the registration route is untouched, the fallbacks go through the
// bounce chunks, and the results are still equal. Then a limit of one group: one success, three fallbacks.
TEST_F(EngineStagingCuda, PinnedLimitTooSmallFallsBackAndLeavesRegistrationAlone) {
    const std::uint64_t gb = group_bytes();
    for (Case k : {Case::disk, Case::group_block}) {
        StagingLimits limits;
        limits.pinned_limit = 4096;
        limits.registration = RegistrationMode::full;
        auto staging = cuda_staging(limits);
        ASSERT_TRUE(staging);
        RunOut o = run(k, staging.get());
        const std::string name = cases::name(k);
        EXPECT_TRUE(cases::bitwise_equal(o.bytes, ref())) << name << " with pinned fallbacks differs from resident";
        EXPECT_EQ(o.owners, 0u) << name;
        cases::expect_pinned_fallbacks(k, o.json, gb);
        EXPECT_EQ(staging->registration_counters().attempts, 0u) << name;
        const Residency src = k == Case::disk ? Residency::file : Residency::pinned;
        const JobCount n = count(o.jobs, src);
        EXPECT_GT(n.unlocked, 0u) << name;
        EXPECT_EQ(n.locked, 0u) << name << ": a pinned fallback was handed over as page-locked";
    }
    StagingLimits limits;
    limits.pinned_limit = (gb + 4095) / 4096 * 4096;
    auto staging = cuda_staging(limits);
    ASSERT_TRUE(staging);
    RunOut o = run(Case::group_block, staging.get());
    EXPECT_TRUE(cases::bitwise_equal(o.bytes, ref()));
    EXPECT_EQ(o.json["host_staging"]["pinned"]["successes"], 1);
    EXPECT_EQ(o.json["counters"]["pinned_fallbacks"], 3);
    EXPECT_EQ(o.json["counters"]["pinned_bytes"], gb);
    EXPECT_EQ(o.json["host_staging"]["registration"]["attempts"], 0);
    const JobCount n = count(o.jobs, Residency::pinned);
    EXPECT_GT(n.locked, 0u);
    EXPECT_GT(n.unlocked, 0u);
}

// (d) The staging backend must be the transport's: host staging on the CUDA transport, and CUDA staging on the CPU
// transport, are refused with a UsageError before anything is allocated.
TEST(EngineStagingCudaConfig, StagingBackendMustBeTheTransports) {
    DDO_REQUIRE_CUDA();
    const ModelLayout & layout = layout_once();
    EngineConfig cfg;
    cfg.route = Route::group_block;
    Capacities caps;  // the engine refuses in its constructor; the plan only has to exist
    caps.device_free = 1ull << 34;
    caps.mem_available = 1ull << 34;
    {
        std::string reason;
        auto host = cases::create(StagingBackend::host, StagingLimits{}, &reason);
        ASSERT_TRUE(host) << reason;
        auto tr = ddo::torch::make_cuda_transport(0);
        EngineOptions eo;
        eo.staging = host.get();
        try {
            Engine e(layout, plan_residency(layout, cfg, caps), linear(), *tr, eo);
            ADD_FAILURE() << "a host staging backend was accepted for the CUDA transport";
        } catch (const UsageError & err) {
            EXPECT_NE(std::string(err.what()).find("use backend 'cuda'"), std::string::npos) << err.what();
        }
        EXPECT_EQ(host->pinned_counters().attempts, 0u);
        EXPECT_EQ(host->registration_counters().attempts, 0u);
    }
    {
        std::string reason;
        auto cuda = cases::create(StagingBackend::cuda, StagingLimits{}, &reason);
        ASSERT_TRUE(cuda) << "CUDA host staging with a usable device: " << reason;
        auto tr = make_cpu_transport();
        EngineOptions eo;
        eo.staging = cuda.get();
        try {
            Engine e(layout, plan_residency(layout, cfg, caps), linear(), *tr, eo);
            ADD_FAILURE() << "a CUDA staging backend was accepted for the CPU transport";
        } catch (const UsageError & err) {
            EXPECT_NE(std::string(err.what()).find("use backend 'host'"), std::string::npos) << err.what();
        }
        EXPECT_EQ(cuda->pinned_counters().attempts, 0u);
        EXPECT_EQ(cuda->registration_counters().attempts, 0u);
    }
}
