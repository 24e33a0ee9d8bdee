// LoRA factors follow the weight they adapt (issue 40 item 6). A plugin holding weights outside the engine (qwen_image_21's
// transformer globals) pairs them with their factors through ComponentLora::attach, which moves the factors to the
// weight's device; model::linear refuses factors on another device than the weight, naming both. Without a GPU the
// second device is `meta` (shapes only, every ATen op has a meta kernel): a weight there stands for a CUDA weight.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/linear.hpp"
#include "ddo/model/lora_adapters.hpp"

namespace {

using ddo::model::ComponentLora;
using ddo::model::LoraDelta;

ComponentLora one_module(c10::Device factors) {
    ComponentLora c;
    c.component = "transformer";
    LoraDelta d;
    d.weight = "img_in.weight";
    d.down = at::ones({2, 8}).to(factors);
    d.up = at::ones({4, 2}).to(factors);
    c.deltas.emplace(d.weight, std::move(d));
    return c;
}

TEST(LoraAttach, FactorsMoveToTheDeviceOfTheWeightTheyAdapt) {
    auto lora = one_module(at::kCPU);  // the run's device (ModelRun::lora)
    const auto weight = at::empty({4, 8}, at::TensorOptions().device(at::kMeta));  // held elsewhere by the plugin
    const auto * d = lora.attach("img_in.weight", weight);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->down.device(), weight.device());
    EXPECT_EQ(d->up.device(), weight.device());
    EXPECT_TRUE(d->handed_out);
    EXPECT_EQ(lora.moved, 1u);
    const auto y = ddo::model::linear(at::empty({3, 8}, at::TensorOptions().device(at::kMeta)), weight, std::nullopt, d);
    EXPECT_EQ(y.device(), weight.device());
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(d->applied, 1u);
    EXPECT_EQ(lora.to_json().at("moved_to_weight_device"), 1);
    EXPECT_EQ(lora.attach("proj_out.weight", weight), nullptr);  // a module no LoRA adapts
}

TEST(LoraAttach, FactorsOnTheWeightsDeviceStayAndComputeTheTerm) {
    auto lora = one_module(at::kCPU);
    const auto weight = at::zeros({4, 8});
    const auto * d = lora.attach("img_in.weight", weight);
    EXPECT_EQ(lora.moved, 0u);
    // x W^T + (x A^T) B^T with W = 0, A = B = 1: every output is 2 * sum(x).
    const auto y = ddo::model::linear(at::ones({1, 8}), weight, std::nullopt, d);
    EXPECT_TRUE(at::equal(y, at::full({1, 4}, 16.0f)));
}

TEST(LoraAttach, MixedDevicesAreRefusedNamingTheWeightAndBothDevices) {
    // What a plugin that skipped attach would hand to linear: factors on the CPU, the weight elsewhere.
    auto lora = one_module(at::kCPU);
    const auto * d = lora.find("img_in.weight");
    const auto weight = at::empty({4, 8}, at::TensorOptions().device(at::kMeta));
    try {
        ddo::model::linear(at::empty({3, 8}, at::TensorOptions().device(at::kMeta)), weight, std::nullopt, d);
        FAIL() << "factors on the CPU met a weight on the meta device without an error";
    } catch (const ddo::RuntimeError & e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("the LoRA factors of img_in.weight are on cpu, its weight on meta"), std::string::npos) << m;
    }
}

}  // namespace
