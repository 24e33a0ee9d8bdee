// Real-size structure test for qwen_image_21 (issue 5, item 8): the real 2.1 transformer config (width 4096,
// 32 heads x 128, SwiGLU 3x, context 4096, 64 latent channels) with num_layers = 2 and a synthetic checkpoint
// of the real tensor shapes in bf16, written as a sparse safetensors file (zero bytes on disk for the payload)
// into the build tree. The blocks run on the core offload engine's `disk` route (make_engine_blocks on the model kit's ComponentWeights: CPU transport,
// the built linear allocator plugin): each block is read from the file into a staging buffer and copied into a
// slot when it runs. The test checks the validated shapes, the output shape, the bytes the engine streamed and
// that the phase ends with no outstanding owner, and prints the real per-block payload size. No real weights needed.
// Memory: one block is 436 MB in bf16; the engine holds 2 staging buffers + 2 slots of one block (~1.7 GB), the
// weights are viewed in place in the slot (checkpoint dtype = compute dtype), so the test stays under ~2.5 GB.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "block_source.hpp"
#include "checkpoint.hpp"
#include "config.hpp"
#include "cpu_plan.hpp"
#include "e2e/structure_support.hpp"
#include "transformer.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;

TEST(Qi21Structure, RealConfigTwoBlocksThroughEngineDiskRoute) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    auto c = qi::TransformerConfig::real();
    c.num_layers = 2;
    EXPECT_EQ(c.inner_dim(), 4096);
    const fs::path dir = ddo::test::write_transformer_config(
        "qwen_image_21_real_structure", {{"_class_name", "QwenImage21Transformer2DModel"}, {"num_layers", 2}});
    auto specs = qi::global_tensor_specs(c);
    for (int64_t i = 0; i < c.num_layers; ++i)
        for (auto & s : qi::block_tensor_specs(c, i)) specs.push_back(s);
    ddo::test::write_sparse_safetensors(dir / "diffusion_pytorch_model.safetensors", specs);

    std::ifstream in(dir / "config.json");
    auto parsed = qi::TransformerConfig::from_json(nlohmann::json::parse(in), dir / "config.json");
    EXPECT_EQ(parsed.inner_dim(), 4096);
    EXPECT_EQ(parsed.mlp_ratio, 3);
    auto f = qi::TensorFile::open_component(dir);
    qi::validate_transformer_checkpoint(f, parsed);  // names, shapes and dtypes of the real model

    const uint64_t payload = qi::block_payload_bytes(f, parsed, 0);
    const uint64_t D = 4096, H = 3 * D;
    EXPECT_EQ(payload, 2 * (4 * D * D + 3 * D * H + 2 * 128));
    std::cout << "[ structure ] real per-block payload: " << payload << " bytes (" << double(payload) / (1 << 20)
              << " MiB bf16); 32 blocks: " << double(payload) * 32 / (1ull << 30) << " GiB\n";

    qi::Transformer tr(parsed, qi::load_transformer_globals(f, parsed, at::kBFloat16));
    const auto plan = ddo::test::cpu_plan("transformer", ddo::Route::disk, linear);
    auto disk = qi::make_engine_blocks(dir, parsed, at::kBFloat16, plan);
    EXPECT_EQ(disk->route(), "disk");
    const int64_t L = 4, h = 4, w = 4;
    qi::TransformerInputs inputs{at::randn({1, h * w, 64}), at::randn({1, L, 4096}), at::full({1}, 0.5),
                                 {{1, h, w}},
                                 at::cat({at::zeros({1, L}, at::kBool), at::ones({1, h * w / 4}, at::kBool)}, 1),
                                 std::nullopt};
    std::vector<qi::KvLayerCache> cache(2);
    auto out = tr.forward(inputs, qi::KvMode::extract, [&](int64_t i, const at::Tensor & x, const qi::BlockContext & ctx) {
        EXPECT_EQ(x.size(2), 4096);
        auto y = qi::run_block(parsed, disk->acquire(i), x, ctx, &cache[size_t(i)]);
        disk->release(i);
        return y;
    });
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, L + h * w, 64}));
    EXPECT_EQ(cache[0].k.sizes(), (std::vector<int64_t>{1, L, 32, 128}));
    EXPECT_TRUE(at::isfinite(out).all().item<bool>());
    EXPECT_EQ(disk->finish(), 0u);  // engine end_phase: no lease or upload outstanding
    // Each block was read from the file once (2 slots hold both blocks, so the prefetch that wraps into the next
    // step finds block 0 still in its slot). The engine moves whole groups: the payload plus the padding that
    // aligns each tensor to 256 bytes inside the group.
    const auto rep = disk->report();
    const auto & engine = rep.at("engine");
    uint64_t group_bytes = 0;
    for (const auto & g : engine.at("plan").at("groups")) {
        EXPECT_EQ(g.at("residency"), "file") << g.dump();
        group_bytes += g.at("bytes").get<uint64_t>();
    }
    const uint64_t tensors = qi::block_tensor_specs(parsed, 0).size() + qi::block_tensor_specs(parsed, 1).size();
    EXPECT_GE(group_bytes, 2 * payload);
    EXPECT_LE(group_bytes, 2 * payload + tensors * (256 + 64));  // slot padding + the file alignment mod 64
    EXPECT_EQ(disk->bytes_streamed(), group_bytes);
    ddo::test::expect_file_pass(engine, group_bytes);
    std::cout << "[ structure ] engine disk route: " << group_bytes << " bytes streamed from the file (payload "
              << 2 * payload << " + alignment " << group_bytes - 2 * payload << ")\n";
    disk.reset();
    fs::remove_all(dir.parent_path());
}
