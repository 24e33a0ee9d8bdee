// Real-size structure test for the LTX-2.3 image DiT (issue 15, deliverable 2): LTX2ImageTransformer2DModel at the
// real LTX-2.3 widths (DEVAIEXP/ltx2-image-diffusers transformer_ltx2_image.py with the 2.3 video stream's values,
// diffusers' get_ltx2_transformer_config("2.3"): 32 heads x 128, cross_attention_dim 4096, gated attention, cross-
// attention modulation, split RoPE) with num_layers = 2, written as a config.json and parsed by
// image_transformer_config_from_file, and a synthetic checkpoint of the real tensor shapes in bf16, written as a
// sparse safetensors file (zero bytes on disk for the payload) into the build tree and validated by
// validate_image_transformer. The per-block payload is printed and checked against the arithmetic of the block
// (attn1, attn2, gated; the FFN; the 9-row and 2-row tables); the largest group is compared with the seeds' "maximum
// dense group payload of 512.50 MiB" for the LTX image checkpoint: 512.50 MiB is exactly the block's 2-D linear
// weights (the four projections of two attentions, their gate logits and the FFN's two matrices) in bf16; the
// engine's group, the whole block, adds the biases, the q/k RMSNorm weights and the modulation tables (224.125 KiB),
// 512.72 MiB. The whole 2-block DiT (prepare, both blocks, finish) then runs on tiny inputs (2x2 latent tokens, 4
// text tokens, batch 1) on the core offload engine's `disk` route (the model kit's ComponentWeights over
// image_transformer_groups, EngineWeights over it: CPU transport, the built linear allocator plugin), every group
// read from the file when acquired. Checked: shapes, the output (zero weights except proj_out's bias, so the
// velocity equals that bias exactly), the bytes the engine streamed against the groups it reads in one pass, no
// outstanding owner at phase end. No real weights needed.
// Memory: a block 512.7 MiB bf16, the globals 422.1 MiB (time_embed.linear 288 MiB); 2 slots of the largest group,
// the weights viewed in place (bf16 checkpoint = bf16 compute): 1.6 GB peak RSS, 5 s on 2 cores (the file is read
// 2.5 GB per pass, from holes).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "e2e/structure_support.hpp"
#include "image_transformer.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::test::mib;
using ddo::test::stored_bytes;

namespace {

// LTX2ImageTransformer2DModel's config with the LTX-2.3 video stream's values (get_ltx2_transformer_config("2.3")),
// num_layers = 2.
nlohmann::json real_ltx23_image_config() {
    auto j = ddo::test::ltx23_video_stream_config();
    j.update({{"_class_name", "LTX2ImageTransformer2DModel"}, {"ff_bias", true}, {"use_prompt_adaln_single", true}});
    return j;
}

// Parameters of one LTX2ImageTransformerBlock at the real widths, D = 4096 (32 x 128), text width 4096: attn1 and
// attn2 (to_q / to_k / to_v / to_out.0 D x D with bias, norm_q / norm_k over D, to_gate_logits D -> 32 with bias),
// the FFN (D -> 4D -> D, with bias), scale_shift_table [9, D] and prompt_scale_shift_table [2, D]. `weights_only`:
// the 2-D linear weights alone (no bias, norm or table).
uint64_t image_block_params(bool weights_only) {
    const uint64_t D = 4096, H = 32;
    const uint64_t attn_weights = 4 * D * D + H * D;
    const uint64_t ff_weights = 2 * D * 4 * D;
    if (weights_only) return 2 * attn_weights + ff_weights;
    const uint64_t attn = attn_weights + 4 * D + 2 * D + H;  // + biases, norm_q / norm_k, gate bias
    return 2 * attn + ff_weights + 4 * D + D + 9 * D + 2 * D;
}

}  // namespace

TEST(Ltx2ImageStructure, RealLtx23ImageConfigTwoBlocksThroughEngineDiskRoute) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);

    // 1. The real 2.3 image config (2 blocks) and a sparse checkpoint of its tensors.
    const fs::path dir = ddo::test::write_transformer_config("ltx2_image_real_structure", real_ltx23_image_config());
    const auto c = lt::image_transformer_config_from_file(dir / "config.json");
    EXPECT_EQ(c.inner_dim(), 4096);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_TRUE(c.gated_attn && c.cross_attn_mod && c.perturbed_attn);
    EXPECT_FALSE(c.use_prompt_embeddings);
    EXPECT_TRUE(c.prompt_adaln());
    EXPECT_EQ(c.rope_type, lt::RopeType::split);
    EXPECT_EQ(c.video_mod_params(), 9);
    const auto specs = lt::image_transformer_specs(c);
    for (const auto & [name, shape] : specs) EXPECT_EQ(name.find("audio"), std::string::npos) << name;
    // Every weight is zero but the output bias: the velocity must come out as exactly that bias (see step 3).
    const auto bias = (at::arange(128, at::kFloat) / 128).to(at::kBFloat16);
    ddo::test::write_sparse_safetensors(dir / "diffusion_pytorch_model.safetensors", specs, {{"proj_out.bias", bias}});
    const auto f = ddo::model::TensorFile::open_component(dir);
    lt::validate_image_transformer(f, c);  // names, shapes and floating dtypes, nothing else
    EXPECT_EQ(f.shape_of("time_embed.linear.weight"), (std::vector<int64_t>{9 * 4096, 4096}));
    EXPECT_EQ(f.shape_of("prompt_adaln.linear.weight"), (std::vector<int64_t>{2 * 4096, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.attn1.to_gate_logits.weight"), (std::vector<int64_t>{32, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.attn2.to_k.weight"), (std::vector<int64_t>{4096, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.ff.net.0.proj.weight"), (std::vector<int64_t>{16384, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.1.scale_shift_table"), (std::vector<int64_t>{9, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.1.prompt_scale_shift_table"), (std::vector<int64_t>{2, 4096}));

    // 2. Per-block payload and the largest group, against the block's arithmetic and the seeds' 512.50 MiB.
    const auto groups = lt::image_transformer_groups(c);
    ASSERT_EQ(groups.size(), 3u);
    const uint64_t payload = stored_bytes(f, groups[1]);
    EXPECT_EQ(payload, 2 * image_block_params(false));
    EXPECT_EQ(stored_bytes(f, groups[2]), payload);
    const uint64_t globals = stored_bytes(f, groups[0]);
    uint64_t largest = 0;
    std::string largest_name;
    for (const auto & g : groups)
        if (stored_bytes(f, g) > largest) largest = stored_bytes(f, g), largest_name = g.name;
    EXPECT_EQ(largest_name, "transformer_blocks.0") << "a block, not the globals, is the largest group";
    uint64_t linear_weights = 0;  // the block's 2-D linear weights as stored
    for (const auto & t : groups[1].tensors)
        if (t.ends_with(".weight") && f.shape_of(t).size() == 2) linear_weights += f.nbytes_of(t);
    EXPECT_EQ(linear_weights, 2 * image_block_params(true));
    constexpr double kSeedDenseGroupMiB = 512.50;  // seeds: "maximum dense group payload of 512.50 MiB"
    EXPECT_DOUBLE_EQ(mib(linear_weights), kSeedDenseGroupMiB);
    std::cout << "[ structure ] real image per-block payload: " << payload << " bytes (" << mib(payload) << " MiB bf16, "
              << image_block_params(false) << " params); 48 blocks: " << double(payload) * 48 / (1ull << 30) << " GiB\n";
    std::cout << "[ structure ] globals payload: " << globals << " bytes (" << mib(globals)
              << " MiB bf16); time_embed.linear.weight [36864, 4096] " << mib(f.nbytes_of("time_embed.linear.weight"))
              << " MiB; whole 48-block DiT " << globals / 2 + 48 * image_block_params(false) << " params\n";
    std::cout << "[ structure ] largest dense group: " << largest_name << ", " << mib(largest) << " MiB bf16; seeds: "
              << kSeedDenseGroupMiB << " MiB\n";
    std::cout << "[ structure ] difference " << mib(largest) - kSeedDenseGroupMiB << " MiB ("
              << (largest - linear_weights) << " bytes): the seeds' 512.50 MiB is the block's 2-D linear weights alone ("
              << mib(linear_weights) << " MiB: q/k/v/out and gate logits of attn1 and attn2, the FFN's two "
              "matrices); the engine's group is the whole block, adding the biases, the q/k RMSNorm weights and the 9 + 2 "
              "row modulation tables; two slots need 2 x " << mib(largest) << " = " << 2 * mib(largest) << " MiB\n";

    // 3. The whole 2-block DiT through the engine's disk route, bf16 weights computed in bf16 on the CPU.
    const auto plan = ddo::test::cpu_plan("transformer", ddo::Route::disk, linear);
    auto cw = ddo::model::ComponentWeights::open(dir, groups, plan, at::kBFloat16);
    EXPECT_EQ(cw->route(), "disk");
    const int64_t B = 1, Hl = 2, Wl = 2, N = Hl * Wl, L = 4;
    lt::ImageTransformerInputs in;
    in.hidden_states = at::randn({B, N, 128}).to(at::kBFloat16);
    in.encoder_hidden_states = at::randn({B, L, 4096}).to(at::kBFloat16);
    in.timestep = at::full({B}, 500.0);
    in.encoder_attention_mask = at::ones({B, L}, at::kLong);
    in.height = Hl;
    in.width = Wl;
    at::Tensor out;
    {
        lt::EngineWeights w(*cw, groups, at::kBFloat16, at::Device(at::kCPU));
        auto s = lt::image_prepare(c, w, in);
        EXPECT_EQ(s.x.sizes(), (std::vector<int64_t>{B, N, 4096}));
        EXPECT_EQ(s.temb.sizes(), (std::vector<int64_t>{B, 1, 9 * 4096}));
        ASSERT_TRUE(s.temb_prompt.has_value());
        EXPECT_EQ(s.temb_prompt->sizes(), (std::vector<int64_t>{B, 1, 2 * 4096}));
        for (int64_t i = 0; i < c.num_layers; ++i) {
            lt::image_run_block(c, w, i, s);
            EXPECT_EQ(s.x.sizes(), (std::vector<int64_t>{B, N, 4096})) << i;
            EXPECT_EQ(s.x.scalar_type(), at::kBFloat16);
            // Zero weights: proj_in gives 0, every attention and FFN output is 0 (and every gate 0): the stream stays 0.
            EXPECT_TRUE(at::all(s.x == 0).item<bool>()) << "block " << i;
        }
        out = lt::image_finish(c, w, s);
    }
    // finish: LayerNorm(0) = 0, shift = scale = 0, proj_out(0) = its bias, exactly.
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{B, N, 128}));
    EXPECT_TRUE(at::equal(out, bias.view({1, 1, 128}).expand({B, N, 128})));
    EXPECT_EQ(cw->finish(), 0u);  // engine end_phase: no lease or upload outstanding

    // Bytes streamed: the groups the engine reads in one pass (globals, block 0, block 1, globals, block 0).
    ASSERT_NO_FATAL_FAILURE(ddo::test::expect_one_pass_over_two_blocks(*cw, f, groups));
    EXPECT_GE(cw->report().at("engine").at("plan").at("slot_bytes").get<uint64_t>(), largest);
    cw.reset();
    fs::remove_all(dir.parent_path());
}
