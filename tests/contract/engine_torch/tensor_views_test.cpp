// at::Tensor views over engine leases (ddo/torch/tensor_views.hpp) on the CPU transport: the views
// alias the slot / resident memory (no copy), carry the checkpoint's dtype and shape, name what is
// missing, and an ATen forward through them is bitwise equal between resident and streamed routes.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "ddo/torch/tensor_views.hpp"
#include "contract/engine/engine_test_model.hpp"
#include "contract/engine_torch/aten_forward.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using namespace ddo::engine;

namespace {

using ddo::testing::engine_model::big_caps;
using ddo::testing::engine_model::linear;

fs::path temp_file(const std::string & stem) {
    return fs::temp_directory_path() / ("ddo_views_" + stem + "_" + std::to_string(::getpid()) + ".safetensors");
}

struct Mixed {
    std::vector<bench::RawTensor> tensors;
    fs::path file;
};

// One group of every dtype family ATen represents, with odd shapes (offsets are 256-aligned anyway).
const Mixed & mixed() {
    static Mixed m = [] {
        Mixed r;
        auto add = [&](std::string name, std::string dtype, std::vector<std::int64_t> shape, std::size_t elem) {
            std::size_t n = elem;
            for (auto d : shape) n *= static_cast<std::size_t>(d);
            bench::RawTensor t{std::move(name), std::move(dtype), std::move(shape), std::vector<unsigned char>(n)};
            for (std::size_t i = 0; i < n; ++i) t.bytes[i] = static_cast<unsigned char>((i * 37 + r.tensors.size() * 11) & 0x7f);
            r.tensors.push_back(std::move(t));
        };
        add("g.bf16", "BF16", {3, 5}, 2);
        add("g.f16", "F16", {7}, 2);
        add("g.f32", "F32", {2, 3, 4}, 4);
        add("g.i64", "I64", {4}, 8);
        add("g.u8", "U8", {5, 1}, 1);
        add("g.f8", "F8_E4M3", {16}, 1);
        add("g.f8b", "F8_E5M2", {2, 8}, 1);
        add("h.f32", "F32", {9, 9}, 4);
        r.file = temp_file("mixed");
        bench::write_safetensors(r.file, r.tensors);
        return r;
    }();
    return m;
}

std::vector<GroupDecl> mixed_groups() {
    GroupDecl g{"g", {}, {}};
    for (const auto & t : mixed().tensors)
        if (t.name.starts_with("g.")) g.tensors.push_back(t.name);
    return {g, GroupDecl{"h", {"h.f32"}, {}}};
}

void expect_views_alias_and_match(Route route) {
    auto ws = store::WeightStore::open_file(mixed().file);
    auto layout = ModelLayout::build(mixed_groups(), ws);
    EngineConfig cfg;
    cfg.route = route;
    cfg.ram_headroom = 0;
    cfg.device_headroom = 0;
    if (route == Route::dynamic) { cfg.resident_budget = 0; cfg.pinned_budget = 0; }
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("views");
    for (int step = 0; step < 2; ++step)
        for (std::size_t g = 0; g < layout.size(); ++g) {
            Lease l = e.acquire(g);
            const auto views = ddo::torch::tensor_views(l);
            EXPECT_EQ(views.group, layout.group(g).name);
            EXPECT_EQ(views.all().size(), layout.group(g).tensors.size());
            for (const auto & raw : mixed().tensors) {
                if (!views.contains(raw.name)) continue;
                const at::Tensor & t = views.at(raw.name);
                const TensorView v = l.view(raw.name);
                EXPECT_EQ(t.data_ptr(), v.data) << raw.name << ": the view must alias the slot, not copy it";
                EXPECT_TRUE(t.device().is_cpu());
                EXPECT_EQ(t.scalar_type(), ddo::torch::to_scalar_type(v.dtype())) << raw.name;
                EXPECT_EQ(t.sizes().vec(), raw.shape) << raw.name;
                EXPECT_TRUE(t.is_contiguous()) << raw.name;
                EXPECT_EQ(static_cast<std::size_t>(t.nbytes()), raw.bytes.size()) << raw.name;
                EXPECT_EQ(std::memcmp(t.data_ptr(), raw.bytes.data(), raw.bytes.size()), 0) << raw.name;
                const at::Tensor one = ddo::torch::tensor_view(l, raw.name);
                EXPECT_EQ(one.data_ptr(), v.data);
            }
        }
    EXPECT_EQ(e.end_phase(), 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
}

const bench::SyntheticShape kShape{4, 64, 3, 8};

at::Tensor aten_run(Route route, int steps = 2) {
    static const fs::path file = [] {
        fs::path p = temp_file("synthetic");
        bench::write_synthetic_checkpoint(p, kShape);
        return p;
    }();
    auto ws = store::WeightStore::open_file(file);
    auto layout = ModelLayout::build(bench::synthetic_groups(kShape), ws);
    EngineConfig cfg;
    cfg.route = route;
    cfg.ram_headroom = 0;
    cfg.device_headroom = 0;
    if (route == Route::dynamic) { cfg.resident_budget = layout.group(0).bytes; cfg.pinned_budget = layout.group(1).bytes; }
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("denoise");
    at::Tensor out;
    for (int s = 0; s < steps; ++s) out = ddo::testing::aten_synthetic_step(e, kShape, at::Device(at::kCPU));
    EXPECT_EQ(e.end_phase(), 0u);
    EXPECT_EQ(e.counters().failures, 0u);
    EXPECT_EQ(e.close(), DDO_STATUS_OK);
    return out;
}

}  // namespace

TEST(TensorViews, ScalarTypesOfEveryCheckpointDtype) {
    using store::DType;
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::bf16), at::kBFloat16);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::f16), at::kHalf);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::f32), at::kFloat);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::f64), at::kDouble);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::f8_e4m3), at::kFloat8_e4m3fn);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::f8_e5m2), at::kFloat8_e5m2);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::boolean), at::kBool);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::u8), at::kByte);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::i8), at::kChar);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::i16), at::kShort);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::i32), at::kInt);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::i64), at::kLong);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::u16), at::kUInt16);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::u32), at::kUInt32);
    EXPECT_EQ(ddo::torch::to_scalar_type(DType::u64), at::kUInt64);
}

TEST(TensorViews, StreamedSlotViewsAliasTheSlotWithShapeAndDtype) { expect_views_alias_and_match(Route::dynamic); }

TEST(TensorViews, ResidentViewsAliasTheResidentBuffer) { expect_views_alias_and_match(Route::resident); }

TEST(TensorViews, MissingTensorOrReleasedLeaseIsAUsageErrorNamingIt) {
    auto ws = store::WeightStore::open_file(mixed().file);
    auto layout = ModelLayout::build(mixed_groups(), ws);
    EngineConfig cfg;
    cfg.route = Route::group_block;
    auto tr = make_cpu_transport();
    Engine e(layout, plan_residency(layout, cfg, big_caps()), linear(), *tr);
    e.begin_phase("p");
    Lease l = e.acquire(0);
    try {
        (void)ddo::torch::tensor_view(l, "h.f32");
        FAIL() << "expected UsageError";
    } catch (const UsageError & err) {
        EXPECT_NE(std::string(err.what()).find("h.f32"), std::string::npos) << err.what();
        EXPECT_NE(std::string(err.what()).find("'g'"), std::string::npos) << err.what();
    }
    const auto views = ddo::torch::tensor_views(l);
    EXPECT_FALSE(views.contains("h.f32"));
    EXPECT_THROW((void)views.at("h.f32"), UsageError);
    l.release();
    EXPECT_THROW((void)ddo::torch::tensor_view(l, "g.f32"), UsageError);
    EXPECT_THROW((void)ddo::torch::tensor_views(l), UsageError);
    EXPECT_EQ(e.end_phase(), 0u);
}

TEST(TensorViews, AtenForwardIsBitwiseEqualResidentVsStreamed) {
    at::set_num_threads(1);  // one fixed reduction order for every route
    const at::Tensor ref = aten_run(Route::resident);
    ASSERT_EQ(ref.numel(), kShape.tokens * kShape.width);
    ASSERT_TRUE(at::isfinite(ref).all().item<bool>());
    for (Route r : {Route::dynamic, Route::group_block, Route::component, Route::disk}) {
        const at::Tensor o = aten_run(r);
        ASSERT_EQ(o.sizes(), ref.sizes()) << to_string(r);
        EXPECT_EQ(std::memcmp(o.data_ptr(), ref.data_ptr(), static_cast<std::size_t>(ref.nbytes())), 0)
            << to_string(r) << " differs from resident";
    }
}

TEST(CudaTransport, RefusedWithTheReasonWhenNoDevice) {
    std::string why;
    if (ddo::torch::cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present; the refusal is tested on CPU-only machines";
    EXPECT_FALSE(why.empty());
    try {
        (void)ddo::torch::make_cuda_transport(0);
        FAIL() << "expected RuntimeError";
    } catch (const RuntimeError & e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CPU transport"), std::string::npos) << e.what();
    }
}
