// Real-size structure test for the LTX-2.3 DiT (issue 14, deliverable 6): the real 2.3 transformer config (diffusers'
// scripts/convert_ltx2_to_diffusers.py, get_ltx2_transformer_config("2.3"); models.md §5.2 column 2.3) with
// num_layers = 2, written as a config.json and parsed by TransformerConfig::from_file, and a synthetic checkpoint of
// the real tensor shapes in bf16, written as a sparse safetensors file (zero bytes on disk for the payload) into the
// build tree and validated by validate_transformer. The per-block payload is printed and checked against the
// arithmetic of models.md §5.3 / §5.7 (six attentions, gate logits, FFNs, tables), against §5.1's 386.07 M
// params per 2.0 block and, with the globals, §5.1's 18.989 B params of the whole 2.3 DiT. The whole 2-block DiT (prepare, both blocks, finish) then runs on tiny inputs (1 latent frame
// of 2x2 tokens, 2 audio frames, 4 text tokens, batch 1) on the core offload engine's `disk` route (the model kit's
// ComponentWeights over transformer_groups: CPU transport, the built linear allocator plugin), every group, the
// globals included, read from the file when acquired. Checked: shapes, the outputs (zero weights except the two
// output biases, so both velocities equal those biases exactly), the bytes the engine streamed against the groups it
// reads in one pass, and no outstanding owner at phase end. No real weights needed.
// Memory: the globals group is the largest (815 MiB bf16, time_embed.linear alone 288 MiB), a block 738 MiB; the
// engine holds 2 slots of the largest group (the host transport reads the file straight into the slot, no staging),
// the weights are viewed in place (checkpoint dtype = compute dtype = bf16), activations are tiny: ~2.1 GB peak RSS,
// ~14 s on 2 cores (the file is read 4 GB per pass, from holes).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "e2e/structure_support.hpp"
#include "transformer.hpp"
#include "transformer_config.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::test::mib;
using ddo::test::stored_bytes;

namespace {

// diffusers' get_ltx2_transformer_config("2.3")["diffusers_config"] with num_layers = 2: the video stream's values
// and the audio stream's.
nlohmann::json real_ltx23_config() {
    auto j = ddo::test::ltx23_video_stream_config();
    j.update({{"_class_name", "LTX2VideoTransformer3DModel"},
              {"audio_in_channels", 128},
              {"audio_out_channels", 128},
              {"audio_patch_size", 1},
              {"audio_patch_size_t", 1},
              {"audio_num_attention_heads", 32},
              {"audio_attention_head_dim", 64},
              {"audio_cross_attention_dim", 2048},
              {"audio_scale_factor", 4},
              {"audio_pos_embed_max_pos", 20},
              {"audio_sampling_rate", 16000},
              {"audio_hop_length", 160},
              {"audio_gated_attn", true},
              {"audio_cross_attn_mod", true},
              {"caption_channels", 3840},
              {"timestep_scale_multiplier", 1000},
              {"cross_attn_timestep_scale_multiplier", 1000},
              {"use_prompt_embeddings", false},
              {"perturbed_attn", true}});
    return j;
}

// Parameters of one LTX2Attention (models.md §5.3): to_q (q_dim -> inner), to_k / to_v (kv_dim -> inner), to_out.0
// (inner -> q_dim), all with bias; norm_q / norm_k over inner; gated: to_gate_logits (q_dim -> heads, bias).
uint64_t attention_params(uint64_t q_dim, uint64_t kv_dim, uint64_t inner, uint64_t heads, bool gated) {
    return (q_dim * inner + inner) + 2 * (kv_dim * inner + inner) + (inner * q_dim + q_dim) + 2 * inner +
           (gated ? heads * q_dim + heads : 0);
}

// Parameters of one LTX2VideoTransformerBlock at the real widths (models.md §5.7): D = 4096 (32 x 128), Da = 2048
// (32 x 64), text widths 4096 / 2048, the cross-modal attentions 32 heads x 64 (inner 2048). `v23`: gated attention
// everywhere, 9 modulation rows instead of 6, the prompt K/V tables.
uint64_t block_params(bool v23) {
    const uint64_t D = 4096, Da = 2048, H = 32;
    const uint64_t n = v23 ? 9 : 6;
    uint64_t p = attention_params(D, D, D, H, v23)           // attn1: video self
                 + attention_params(Da, Da, Da, H, v23)      // audio_attn1: audio self
                 + attention_params(D, 4096, D, H, v23)      // attn2: video <- text (cross_attention_dim 4096)
                 + attention_params(Da, 2048, Da, H, v23)    // audio_attn2: audio <- text (2048)
                 + attention_params(D, Da, Da, H, v23)       // audio_to_video_attn: q video, kv audio
                 + attention_params(Da, D, Da, H, v23);      // video_to_audio_attn: q audio, kv video
    p += (D * 4 * D + 4 * D) + (4 * D * D + D);              // ff: D -> 4D -> D, with bias
    p += (Da * 4 * Da + 4 * Da) + (4 * Da * Da + Da);        // audio_ff
    p += n * D + n * Da;                                     // scale_shift_table, audio_scale_shift_table
    p += 5 * D + 5 * Da;                                     // video_a2v / audio_a2v cross-attn tables
    if (v23) p += 2 * D + 2 * Da;                            // prompt_scale_shift_table, audio_prompt_...
    return p;
}

}  // namespace

TEST(Ltx2Structure, RealLtx23ConfigTwoBlocksThroughEngineDiskRoute) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);

    // 1. The real 2.3 config (2 blocks) and a sparse checkpoint of its tensors.
    const fs::path dir = ddo::test::write_transformer_config("ltx2_real_structure", real_ltx23_config());
    const auto c = lt::TransformerConfig::from_file(dir / "config.json");
    EXPECT_EQ(c.inner_dim(), 4096);
    EXPECT_EQ(c.audio_inner_dim(), 2048);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_TRUE(c.gated_attn && c.audio_gated_attn && c.cross_attn_mod && c.audio_cross_attn_mod);
    EXPECT_TRUE(c.perturbed_attn);
    EXPECT_FALSE(c.use_prompt_embeddings);
    EXPECT_TRUE(c.prompt_adaln());
    EXPECT_EQ(c.rope_type, lt::RopeType::split);
    EXPECT_EQ(c.video_mod_params(), 9);
    // Every weight is zero but the output biases: the velocities must come out as exactly these (see step 3).
    const auto video_bias = (at::arange(128, at::kFloat) / 128).to(at::kBFloat16);
    const auto audio_bias = (-at::arange(128, at::kFloat) / 64).to(at::kBFloat16);
    ddo::test::write_sparse_safetensors(dir / "diffusion_pytorch_model.safetensors", lt::tensor_specs(c),
                             {{"proj_out.bias", video_bias}, {"audio_proj_out.bias", audio_bias}});
    const auto f = ddo::model::TensorFile::open_component(dir);
    lt::validate_transformer(f, c);  // names, shapes and floating dtypes of the real model, nothing else
    EXPECT_EQ(f.shape_of("time_embed.linear.weight"), (std::vector<int64_t>{9 * 4096, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.audio_to_video_attn.to_q.weight"), (std::vector<int64_t>{2048, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.video_to_audio_attn.to_k.weight"), (std::vector<int64_t>{2048, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.0.attn1.to_gate_logits.weight"), (std::vector<int64_t>{32, 4096}));
    EXPECT_EQ(f.shape_of("transformer_blocks.1.prompt_scale_shift_table"), (std::vector<int64_t>{2, 4096}));

    // 2. Per-block payload: the checkpoint's bytes of group 1 against the arithmetic of models.md §5.7.
    const auto groups = lt::transformer_groups(c);
    ASSERT_EQ(groups.size(), 3u);
    const uint64_t payload = stored_bytes(f, groups[1]);
    EXPECT_EQ(payload, 2 * block_params(true));
    EXPECT_EQ(stored_bytes(f, groups[2]), payload);
    // models.md §5.1: 386.07 M params per 2.0 block; 2.3 adds the six gate-logit linears (three q_dim 4096, three
    // q_dim 2048: 32 x q_dim + 32 each), three more modulation rows per stream and the two prompt tables.
    const uint64_t p20 = block_params(false);
    EXPECT_EQ((p20 + 5000) / 10000, 38607u) << p20;
    const uint64_t gates = 3 * (32 * 4096 + 32) + 3 * (32 * 2048 + 32), tables = 3 * (4096 + 2048) + 2 * (4096 + 2048);
    EXPECT_EQ(block_params(true) - p20, gates + tables);
    const uint64_t globals = stored_bytes(f, groups[0]);
    // models.md §5.1: the whole 2.3 DiT is 18.989 B params (globals + 48 blocks).
    EXPECT_EQ((globals / 2 + 48 * block_params(true) + 500000) / 1000000, 18989u);
    std::cout << "[ structure ] real per-block payload: " << payload << " bytes (" << mib(payload) << " MiB bf16, "
              << block_params(true) << " params; 2.0 block " << p20 << " params, 2.3 adds " << block_params(true) - p20
              << ": gate logits " << gates << ", tables " << tables << "); 48 blocks: "
              << double(payload) * 48 / (1ull << 30) << " GiB\n";
    std::cout << "[ structure ] globals payload: " << globals << " bytes (" << mib(globals)
              << " MiB bf16); time_embed.linear.weight [36864, 4096] " << mib(f.nbytes_of("time_embed.linear.weight"))
              << " MiB; whole 48-block DiT " << globals / 2 + 48 * block_params(true) << " params\n";

    // 3. The whole 2-block DiT through the engine's disk route, bf16 weights computed in bf16 on the CPU.
    const auto plan = ddo::test::cpu_plan("transformer", ddo::Route::disk, linear);
    auto cw = ddo::model::ComponentWeights::open(dir, groups, plan, at::kBFloat16);
    EXPECT_EQ(cw->route(), "disk");
    const int64_t B = 1, F = 1, Hl = 2, Wl = 2, Nv = F * Hl * Wl, Na = 2, L = 4;
    lt::TransformerInputs in;
    in.hidden_states = at::randn({B, Nv, 128});
    in.audio_hidden_states = at::randn({B, Na, 128});
    in.encoder_hidden_states = at::randn({B, L, 4096});
    in.audio_encoder_hidden_states = at::randn({B, L, 2048});
    in.timestep = at::full({B}, 500.0);
    in.sigma = at::full({B}, 500.0);  // the 2.3 prompt AdaLN reads sigma * 1000
    in.encoder_attention_mask = at::ones({B, L});
    in.audio_encoder_attention_mask = at::ones({B, L});
    in.num_frames = F;
    in.height = Hl;
    in.width = Wl;
    in.audio_num_frames = Na;
    std::pair<at::Tensor, at::Tensor> out;
    {
        lt::EngineWeights w(*cw, groups, at::kBFloat16, at::Device(at::kCPU));
        auto s = lt::prepare(c, w, in);
        EXPECT_EQ(s.x.sizes(), (std::vector<int64_t>{B, Nv, 4096}));
        EXPECT_EQ(s.a.sizes(), (std::vector<int64_t>{B, Na, 2048}));
        EXPECT_EQ(s.temb.sizes(), (std::vector<int64_t>{B, 1, 9 * 4096}));
        EXPECT_EQ(s.temb_audio.sizes(), (std::vector<int64_t>{B, 1, 9 * 2048}));
        ASSERT_TRUE(s.temb_prompt.has_value());
        EXPECT_EQ(s.temb_prompt->sizes(), (std::vector<int64_t>{B, 1, 2 * 4096}));
        for (int64_t i = 0; i < c.num_layers; ++i) {
            lt::run_block(c, w, i, s);
            EXPECT_EQ(s.x.sizes(), (std::vector<int64_t>{B, Nv, 4096})) << i;
            EXPECT_EQ(s.a.sizes(), (std::vector<int64_t>{B, Na, 2048})) << i;
            EXPECT_EQ(s.x.scalar_type(), at::kBFloat16);
            // Zero weights: proj_in gives 0, every attention and FFN output is 0 (and every gate 0): the streams stay 0.
            EXPECT_TRUE(at::all(s.x == 0).item<bool>()) << "block " << i;
            EXPECT_TRUE(at::all(s.a == 0).item<bool>()) << "block " << i;
        }
        out = lt::finish(c, w, s);
    }
    // finish: LayerNorm(0) = 0, shift = scale = 0, proj_out(0) = its bias, exactly.
    EXPECT_EQ(out.first.sizes(), (std::vector<int64_t>{B, Nv, 128}));
    EXPECT_EQ(out.second.sizes(), (std::vector<int64_t>{B, Na, 128}));
    EXPECT_TRUE(at::isfinite(out.first).all().item<bool>());
    EXPECT_TRUE(at::isfinite(out.second).all().item<bool>());
    EXPECT_TRUE(at::equal(out.first, video_bias.view({1, 1, 128}).expand({B, Nv, 128})));
    EXPECT_TRUE(at::equal(out.second, audio_bias.view({1, 1, 128}).expand({B, Na, 128})));
    EXPECT_EQ(cw->finish(), 0u);  // engine end_phase: no lease or upload outstanding

    // Bytes streamed: the groups the engine reads in one pass (globals, block 0, block 1, globals, block 0).
    ASSERT_NO_FATAL_FAILURE(ddo::test::expect_one_pass_over_two_blocks(*cw, f, groups));
    cw.reset();
    fs::remove_all(dir.parent_path());
}
