// The CUDA transport under the engine (label cuda): payload correctness from every source, slot reuse
// only after the compute-stream fence, close refused while an upload is pending, counters with the
// completed-event upload time. Without a usable device every test is skipped with the reason.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#include <nlohmann/json.hpp>

#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "ddo/torch/tensor_views.hpp"
#include "contract/engine_torch/aten_forward.hpp"
#include "cuda/engine/cuda_engine_support.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;

namespace {

using ddo::testing::cuda::linear;

// Width 768: one block is ~31 MB, larger than the transport's 16 MiB pinned chunks (pageable path).
const bench::SyntheticShape kShape{4, 768, 3, 16};

const fs::path & checkpoint() {
    static const fs::path p = [] {
        fs::path f = fs::temp_directory_path() / ("ddo_cuda_engine_" + std::to_string(::getpid()) + ".safetensors");
        bench::write_synthetic_checkpoint(f, kShape);
        return f;
    }();
    return p;
}

EngineConfig config(Route route, const ModelLayout & layout) {
    EngineConfig cfg;
    cfg.route = route;
    cfg.ram_headroom = 0;
    if (route == Route::dynamic) { cfg.resident_budget = layout.group(0).bytes; cfg.pinned_budget = layout.group(1).bytes; }
    return cfg;
}

const at::Device kCuda(at::kCUDA, 0);

void sleep_compute_stream(double approx_seconds) {
    at::cuda::sleep(static_cast<std::int64_t>(approx_seconds * 1.5e9));  // clock64 cycles, ~1.5-2 GHz
}

}  // namespace

TEST(EngineCuda, PayloadOfEverySourceIsExactAfterUpload) {
    DDO_REQUIRE_CUDA();
    auto ws = store::WeightStore::open_file(checkpoint());
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), ws);
    for (Route route : {Route::dynamic, Route::disk, Route::resident}) {
        auto tr = ddo::torch::make_cuda_transport(0);
        const Plan plan = plan_residency(layout, config(route, layout), tr->observe_device());
        Engine e(layout, plan, linear(), *tr);
        e.begin_phase("check");
        for (int step = 0; step < 2; ++step)
            for (std::size_t g = 0; g < layout.size(); ++g) {
                Lease l = e.acquire(g);
                const auto views = ddo::torch::tensor_views(l);
                for (const auto & s : layout.group(g).tensors) {
                    const at::Tensor & t = views.at(s.name());
                    ASSERT_TRUE(t.is_cuda());
                    EXPECT_EQ(t.data_ptr(), l.view(s.name()).data);
                    std::vector<unsigned char> want(s.nbytes);
                    ws.read_tensor(*s.info, want.data(), store::ReadMode::pread);
                    const at::Tensor got = t.cpu();  // on the compute stream, after the upload's event
                    EXPECT_EQ(std::memcmp(got.data_ptr(), want.data(), want.size()), 0)
                        << to_string(route) << " group " << layout.group(g).name << " tensor " << s.name() << " ("
                        << to_string(plan.groups[g].residency) << ")";
                }
            }
        EXPECT_EQ(e.end_phase(), 0u) << to_string(route);
        EXPECT_EQ(e.counters().failures, 0u) << to_string(route);
        EXPECT_EQ(e.close(), DDO_STATUS_OK) << to_string(route);
    }
}

TEST(EngineCuda, AtenForwardIsBitwiseEqualResidentVsStreamed) {
    DDO_REQUIRE_CUDA();
    auto ws = store::WeightStore::open_file(checkpoint());
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), ws);
    auto run = [&](Route route) {
        auto tr = ddo::torch::make_cuda_transport(0);
        Engine e(layout, plan_residency(layout, config(route, layout), tr->observe_device()), linear(), *tr);
        e.begin_phase("denoise");
        at::Tensor out;
        for (int s = 0; s < 2; ++s) out = ddo::testing::aten_synthetic_step(e, kShape, kCuda);
        EXPECT_EQ(e.end_phase(), 0u);
        EXPECT_EQ(e.close(), DDO_STATUS_OK);
        return out;
    };
    const at::Tensor ref = run(Route::resident);
    for (Route r : {Route::dynamic, Route::group_block, Route::disk, Route::component}) {
        const at::Tensor o = run(r);
        EXPECT_EQ(std::memcmp(o.data_ptr(), ref.data_ptr(), static_cast<std::size_t>(ref.nbytes())), 0) << to_string(r) << " differs";
    }
}

TEST(EngineCuda, SlotIsRewrittenOnlyAfterTheComputeStreamFence) {
    DDO_REQUIRE_CUDA();
    auto tr = ddo::torch::make_cuda_transport(0);
    const std::int64_t n = 1 << 22;
    const std::uint64_t bytes = static_cast<std::uint64_t>(n) * 4;
    at::Tensor slot = at::zeros({n}, at::TensorOptions().dtype(at::kFloat).device(kCuda));
    HostBuffer a = tr->allocate_host(bytes, true), b = tr->allocate_host(bytes, true);
    ASSERT_TRUE(a.pinned());
    std::fill_n(static_cast<float *>(a.data()), n, 1.0f);
    std::fill_n(static_cast<float *>(b.data()), n, 2.0f);
    auto job = [&](const HostBuffer & src, FencePtr slot_free) {
        CopyJob j;
        j.group_name = "test";
        j.dst = slot.data_ptr();
        j.bytes = bytes;
        j.source = Residency::pinned;
        j.src = src.data();
        j.slot_free = std::move(slot_free);
        return j;
    };
    FencePtr first = tr->submit(job(a, nullptr));
    tr->compute_wait(*first);                 // the compute stream waits on the upload's event
    sleep_compute_stream(0.3);                // a long kernel still "reading" before the snapshot
    const at::Tensor snapshot = slot.clone(); // reads the slot on the compute stream
    FencePtr readers = tr->compute_fence();
    FencePtr second = tr->submit(job(b, readers));  // must not overwrite before `readers` completes
    tr->compute_wait(*second);
    const at::Tensor after = slot.clone();
    tr->drain();
    EXPECT_TRUE(readers->ready());
    EXPECT_TRUE(second->ready());
    EXPECT_TRUE(at::all(snapshot.cpu() == 1.0f).item<bool>()) << "the copy overwrote the slot before its readers finished";
    EXPECT_TRUE(at::all(after.cpu() == 2.0f).item<bool>()) << "compute did not wait for the second upload";
    EXPECT_EQ(tr->stats().failures, 0u);
}

TEST(EngineCuda, CloseIsRefusedWhileALeaseOrAnUploadIsPending) {
    DDO_REQUIRE_CUDA();
    auto ws = store::WeightStore::open_file(checkpoint());
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), ws);
    auto tr = ddo::torch::make_cuda_transport(0);
    Engine e(layout, plan_residency(layout, config(Route::group_block, layout), tr->observe_device()), linear(), *tr);
    e.begin_phase("p");
    Lease l0 = e.acquire(0);
    EXPECT_EQ(e.close(), DDO_STATUS_BUSY);  // a lease is held
    sleep_compute_stream(1.0);              // compute still reading slot 0 for ~1 s
    l0.release();                           // readers fence recorded after the sleep
    Lease l1 = e.acquire(1);                // prefetches group 2 into slot 0: waits on the copy stream
    l1.release();
    EXPECT_EQ(e.close(), DDO_STATUS_BUSY) << "the upload into slot 0 is still pending behind the compute fence";
    EXPECT_EQ(e.end_phase(), 0u);           // drains
    const auto c = e.counters();
    EXPECT_EQ(c.close_refusals, 2u);
    EXPECT_EQ(c.outstanding_owners, 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

TEST(EngineCuda, CountersReportCompletedEventUploadTime) {
    DDO_REQUIRE_CUDA();
    auto ws = store::WeightStore::open_file(checkpoint());
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), ws);
    auto tr = ddo::torch::make_cuda_transport(0);
    Engine e(layout, plan_residency(layout, config(Route::dynamic, layout), tr->observe_device()), linear(), *tr);
    e.begin_phase("denoise");
    for (int s = 0; s < 2; ++s) (void)ddo::testing::aten_synthetic_step(e, kShape, kCuda);
    EXPECT_EQ(e.end_phase(), 0u);
    const EngineCounters c = e.counters();
    EXPECT_EQ(c.transport, "cuda");
    ASSERT_TRUE(c.upload_event_s.has_value()) << c.upload_event_reason;
    EXPECT_GT(*c.upload_event_s, 0.0);
    EXPECT_GT(c.upload_copy_s, 0.0);
    EXPECT_GT(c.bytes_from_pageable, 0u);
    EXPECT_GT(c.bytes_from_pinned, 0u);
    EXPECT_GT(c.bytes_resident, 0u);
    EXPECT_FALSE(c.stall_s.has_value());
    EXPECT_FALSE(c.stall_reason.empty());
    EXPECT_EQ(c.failures, 0u);
    const nlohmann::json j = e.to_json();
    EXPECT_TRUE(j["counters"]["upload_event_s"].is_number());
    EXPECT_EQ(j["allocator"]["backend"], "cuda");
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

TEST(EngineCuda, ObservesTheDeviceAndRefusesABadOrdinal) {
    DDO_REQUIRE_CUDA();
    auto tr = ddo::torch::make_cuda_transport(0);
    const Capacities caps = tr->observe_device();
    ASSERT_TRUE(caps.device_free.has_value());
    ASSERT_TRUE(caps.device_total.has_value());
    EXPECT_LE(*caps.device_free, *caps.device_total);
    EXPECT_EQ(tr->name(), "cuda");
    EXPECT_FALSE(tr->device_is_host());
    EXPECT_THROW((void)ddo::torch::make_cuda_transport(4096), UsageError);
}
