// ltx2_video's pipeline against diffusers' LTX2Pipeline (tools/reference/ltx2_pipeline_fixtures.py), from the same
// prompt embeddings and the pipeline's own seeded noise: the denoised latents of a plain 2-step run on a tiny
// LTX-2.0 checkpoint (dynamic shift, shift_terminal) and of a fully guided run (CFG, STG, modality isolation,
// rescale, the distilled sigma list, use_cross_timestep, the BWE vocoder) on a tiny LTX-2.3 checkpoint; then the
// decoded frames and waveform; and the DiT on the engine's resident, dynamic and disk routes (the linear allocator
// plugin, CPU transport) giving bitwise the same latents. The guided case again on quantized transformers (SDNQ int8,
// uint4 + SVD, scaled fp8, GGUF Q8_0, GGUF Q4_K on a wider DiT; tools/reference/ltx2_quant_fixtures.py). Tolerances
// (fp32): latents and waveform 1e-4 max abs, frames 1/255; routes: bitwise among themselves.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "audio_vae_decoder.hpp"
#include "connectors.hpp"
#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latents.hpp"
#include "parity/ltx2_parity_routes.hpp"
#include "parity/parity_support.hpp"
#include "transformer.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"
#include "video_vae_decoder.hpp"
#include "vocoder.hpp"
#include "vocoder_bwe.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_PIPELINE_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_pipeline_fixtures"); }

class Ltx2PipelineParity : public ::testing::Test {
protected:
    void SetUp() override {
        ddo::test::announce_reference(reference());
    }
};

struct Case {
    std::string name;
    fs::path ckpt;
    nlohmann::json settings;
    bool negative;
};

Case case_of(const std::string & name) {
    const auto & c = reference().at("cases").at(name);
    return {name, kDir / ("checkpoint_" + name), c.at("settings"), c.at("negative").get<bool>()};
}

double num(const nlohmann::json & s, const char * k) { return s.at(k).get<double>(); }

struct Outputs {
    at::Tensor video_latents, audio_latents;  // de-normalised, unpacked, sample 0 (output_type="latent")
    at::Tensor frames, audio;                 // [F, 3, H, W] in [0, 1], [2, samples] (output_type="pt")
};

// The pipeline from the embeddings to frames and waveform, every component resident (ResidentWeights) unless
// `dit_source` gives the DiT's weights (an engine route).
Outputs run_pipeline(const Case & k, lt::Weights * dit_source = nullptr) {
    auto m = lt::VideoModel::open(k.ckpt);
    const auto & tc = m.transformer_config;
    lt::ResidentWeights resident_dit(m.transformer, at::kFloat, at::kCPU), conn(m.connectors, at::kFloat, at::kCPU);
    lt::Weights & dit = dit_source ? *dit_source : resident_dit;
    lt::ResidentWeights vae(m.vae, at::kFloat, at::kCPU), avae(m.audio_vae, at::kFloat, at::kCPU);
    lt::ResidentWeights voc(m.vocoder, at::kFloat, at::kCPU);

    auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    auto embeds = pe.read("prompt_embeds"), mask = pe.read("prompt_attention_mask");
    if (k.negative) {
        embeds = at::cat({pe.read("negative_prompt_embeds"), embeds});
        mask = at::cat({pe.read("negative_prompt_attention_mask"), mask});
    }
    const auto text = lt::connectors_forward(m.connectors_config, conn, embeds, mask);

    const auto & s = k.settings;
    const auto r = m.ratios();
    const auto g = lt::latent_geometry(r, s.at("num_frames").get<int64_t>(), s.at("height").get<int64_t>(),
                                       s.at("width").get<int64_t>(), num(s, "frame_rate"));
    auto noise = lt::draw_noise(r, g, 1, uint64_t(reference().at("seed").get<int>()), at::kCPU);
    std::vector<float> sigmas;
    if (s.contains("sigmas")) sigmas = ddo::model::sigmas_from(s.at("sigmas").get<std::vector<double>>());
    else sigmas = ddo::model::default_sigmas(s.at("num_inference_steps").get<int>());
    const auto schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, g.video_tokens());

    lt::DenoiseSettings ds;
    ds.video = {num(s, "guidance_scale"), num(s, "stg_scale"), num(s, "modality_scale"), num(s, "guidance_rescale")};
    ds.audio = {num(s, "audio_guidance_scale"), num(s, "audio_stg_scale"), num(s, "audio_modality_scale"),
                num(s, "audio_guidance_rescale")};
    if (!s.at("spatio_temporal_guidance_blocks").is_null())
        ds.stg_blocks = s.at("spatio_temporal_guidance_blocks").get<std::vector<int64_t>>();
    ds.use_cross_timestep = s.at("use_cross_timestep").get<bool>();
    ds.fps = num(s, "frame_rate");
    auto d = lt::denoise(tc, dit, text, g, noise, schedule, ds);

    Outputs o;
    const auto stats = lt::read_video_latent_stats(m.vae, m.vae_config);
    const auto z = lt::denormalize_video_latents(lt::unpack_video(d.video, g), stats.mean, stats.std,
                                                 m.vae_config.scaling_factor);
    o.video_latents = z[0];
    const auto packed = lt::denormalize_audio_latents(avae, d.audio);
    const auto a = lt::unpack_audio_latents(packed, m.audio_vae_config.latent_mel_bins());
    o.audio_latents = a[0];

    lt::VideoVaeDecoder decoder(m.vae_config, vae);
    const auto video = decoder.decode(z);                                    // [1, 3, F, H, W] in [-1, 1]
    o.frames = (video[0] / 2 + 0.5).clamp(0, 1).permute({1, 0, 2, 3});      // postprocess_video, output "pt"
    const auto mel = lt::AudioVaeDecoder(m.audio_vae_config).decode(avae, a);
    o.audio = (m.vocoder_bwe_config ? lt::VocoderWithBwe(*m.vocoder_bwe_config).forward(voc, mel)
                                    : lt::Vocoder(*m.vocoder_config).forward(voc, mel))[0];
    return o;
}

void compare(const std::string & label, const Outputs & o, const TensorFile & want) {
    expect_close(label + ": video latents", o.video_latents, want.read("latents"), 1e-4);
    expect_close(label + ": audio latents", o.audio_latents, want.read("audio_latents"), 1e-4);
    expect_close(label + ": frames", o.frames, want.read("frames"), 1.0 / 255);
    expect_close(label + ": waveform", o.audio, want.read("audio"), 1e-4);
}

}  // namespace

TEST_F(Ltx2PipelineParity, Schedules) {
    // set_timesteps as LTX2Pipeline calls it: the dev scheduler (dynamic exponential shift, shift_terminal 0.1) and
    // the distilled one (no shift), on the default grid and the distilled lists. Tolerance 1e-6 (float32 arrays).
    const auto want = TensorFile::open_file(kDir / "schedule.safetensors");
    int i = 0;
    for (const auto & c : reference().at("schedules")) {
        const auto cfg = ddo::model::FlowMatchConfig::from_json(c.at("config"), "reference.json");
        const auto grid = c.at("sigmas").is_null() ? ddo::model::default_sigmas(c.at("steps").get<int>())
                                                   : ddo::model::sigmas_from(c.at("sigmas").get<std::vector<double>>());
        EXPECT_NEAR(lt::ltx2_mu(c.at("config"), c.at("video_tokens").get<int64_t>()), c.at("mu").get<double>(), 1e-12);
        const auto s = lt::ltx2_schedule(cfg, c.at("config"), grid, c.at("video_tokens").get<int64_t>());
        const auto name = c.at("name").get<std::string>() + " case " + std::to_string(i);
        expect_close(name + ": sigmas", at::tensor(s.sigmas), want.read("case" + std::to_string(i) + ".sigmas"), 1e-6);
        expect_close(name + ": timesteps", at::tensor(s.timesteps), want.read("case" + std::to_string(i) + ".timesteps"),
                     1e-6 * 1000);
        ++i;
    }
    EXPECT_EQ(i, 6);
}

TEST_F(Ltx2PipelineParity, Plain20) {
    compare("LTX-2.0 plain (2 steps, dynamic shift)", run_pipeline(case_of("20")),
            TensorFile::open_file(kDir / "pipeline_20.safetensors"));
}

TEST_F(Ltx2PipelineParity, Guided23) {
    compare("LTX-2.3 guided (CFG+STG+modality+rescale, distilled sigmas, BWE vocoder)", run_pipeline(case_of("23")),
            TensorFile::open_file(kDir / "pipeline_23.safetensors"));
}

TEST_F(Ltx2PipelineParity, DitRoutesGiveBitwiseEqualLatents) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_PIPELINE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    const auto k = case_of("23");  // every pass kind (CFG batch, STG, isolation) streams the blocks
    // Note [Mapped residents]: on the host every engine route presents a tensor at its file alignment (mod 64), as
    // diffusers' from_pretrained does; the in-test ResidentWeights' aligned copies may differ from them in the last
    // bits (single-row products round by alignment), so the routes are compared with each other bitwise and with
    // diffusers' outputs within the tolerance.
    const auto ref = TensorFile::open_file(kDir / "pipeline_23.safetensors");
    std::optional<Outputs> want;
    const auto tc = lt::TransformerConfig::from_file(k.ckpt / "transformer" / "config.json");
    const auto groups = lt::transformer_groups(tc);
    const auto tf = TensorFile::open_component(k.ckpt / "transformer");
    uint64_t block_bytes = 0;
    for (const auto & g : groups)
        if (g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) block_bytes += tf.nbytes_of(n);
    struct Route {
        ddo::Route route;
        double resident_gb;
        const char * name;
    };
    for (const Route & r : {Route{ddo::Route::resident, 0, "resident"},
                            Route{ddo::Route::dynamic, double(block_bytes + 1024) / 1073741824.0, "dynamic"},
                            Route{ddo::Route::disk, 0, "disk"}}) {
        const auto plan = ddo::test::cpu_plan("transformer", r.route, linear, r.resident_gb);
        auto cw = ddo::model::ComponentWeights::open(k.ckpt / "transformer", groups, plan, at::kFloat);
        lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
        const auto got = run_pipeline(k, &ew);
        EXPECT_EQ(cw->finish(), 0u) << r.name << ": outstanding owners at the end of the phase";
        EXPECT_EQ(cw->route(), r.name);
        compare(std::string("LTX-2.3 guided, transformer on ") + r.name, got, ref);
        if (!want) {
            want = got;
        } else {
            EXPECT_TRUE(at::equal(got.video_latents, want->video_latents))
                << r.name << ": video latents differ from the resident route's by up to "
                << (got.video_latents - want->video_latents).abs().max().item<double>();
            EXPECT_TRUE(at::equal(got.audio_latents, want->audio_latents)) << r.name << ": audio latents differ";
            EXPECT_TRUE(at::equal(got.audio, want->audio)) << r.name << ": waveform differs";
        }
        if (r.route != ddo::Route::resident) {
            EXPECT_GT(cw->bytes_streamed(), 0u) << r.name;
        }
        std::cout << "[ routes    ] transformer on " << r.name << ": latents bitwise equal to the resident route's, "
                  << cw->bytes_streamed()
                  << " bytes streamed\n";
    }
}

// Issue 26: the guided LTX-2.3 case on SDNQ int8 and uint4 + SVD transformers (diffusers' own SDNQ integration), a
// scaled-fp8 one (Lightricks' weight_scale layout; the reference runs the weights as ltx_core folds them) and GGUF
// Q8_0 and Q4_K ones (gguf-py's decode run dense; Q4_K on the wide DiT whose rows are whole 256-blocks), resident and
// on every engine route (tools/reference/ltx2_quant_fixtures.py). The same tolerances as the dense case against
// diffusers; the engine's routes bitwise equal to its resident route (Note [Mapped residents]: the in-test resident
// source may differ from them in the last bits); the report counts the stored formats.
TEST_F(Ltx2PipelineParity, QuantizedTransformersEqualDiffusers) {
    const fs::path qdir = LTX2_QUANT_FIXTURE_DIR;
    const auto & qref = ddo::test::reference_of(qdir, "ltx2_quant_fixtures");
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_PIPELINE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    // What each case's report must name: the method and a format it counts (docs/metrics.md).
    const std::map<std::string, std::pair<std::string, std::string>> expected = {
        {"sdnq_int8", {"sdnq", "SDNQ int8"}},       {"sdnq_uint4_svd", {"sdnq", "SDNQ uint4"}},
        {"fp8_scaled", {"fp8", "FP8 E4M3 scaled"}}, {"gguf_q8_0", {"gguf", "Q8_0"}},
        {"gguf_q4_k", {"gguf", "Q4_K"}}};
    std::set<std::string> seen;
    for (const auto & [c, facts] : qref.at("cases").items()) {
        ASSERT_TRUE(expected.count(c)) << "a case this test does not know: " << c;
        seen.insert(c);
        const auto & [method, format] = expected.at(c);
        Case k = case_of("23");
        k.ckpt = qdir / ("checkpoint_" + c);
        ASSERT_EQ(k.settings, qref.at("settings")) << "the quantized cases run the guided 2.3 settings";
        const auto want = TensorFile::open_file(qdir / ("pipeline_" + c + ".safetensors"));
        const auto tf = TensorFile::open_component(k.ckpt / "transformer");
        ASSERT_TRUE(tf.quantized()) << c;
        compare("LTX-2.3 guided, " + c + " transformer, resident", run_pipeline(k), want);

        const auto tc = lt::TransformerConfig::from_file(k.ckpt / "transformer" / "config.json");
        if (facts.at("wide").get<bool>()) {
            EXPECT_EQ(tc.num_attention_heads * tc.attention_head_dim % 256, 0) << c << ": the wide DiT";
        }
        const auto groups = lt::transformer_groups(tc);
        uint64_t resident_bytes = 0;  // stored bytes of all but block 1, which streams on the dynamic route
        for (const auto & g : groups)
            if (g.name != "transformer_blocks.1")
                for (const auto & n : g.tensors) resident_bytes += tf.nbytes_of(n);
        std::optional<Outputs> engine_resident;
        uint64_t dynamic_streamed = 0;
        for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                                 ddo::Route::group_leaf}) {
            const std::string r = ddo::to_string(route);
            const double gb = route == ddo::Route::dynamic ? double(resident_bytes + 1024) / 1073741824.0 : 0;
            auto cw = ddo::model::ComponentWeights::open(k.ckpt / "transformer", groups,
                                                         ddo::test::cpu_plan("transformer", route, linear, gb),
                                                         at::kFloat);
            lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
            const auto got = run_pipeline(k, &ew);
            EXPECT_EQ(cw->finish(), 0u) << c << " " << r << ": outstanding owners at the end of the phase";
            EXPECT_EQ(cw->route(), r);
            if (!engine_resident) {
                engine_resident = got;
            } else {
                EXPECT_TRUE(at::equal(got.video_latents, engine_resident->video_latents))
                    << c << " " << r << ": video latents differ from the engine's resident route's by up to "
                    << (got.video_latents - engine_resident->video_latents).abs().max().item<double>();
                EXPECT_TRUE(at::equal(got.audio_latents, engine_resident->audio_latents)) << c << " " << r;
                EXPECT_TRUE(at::equal(got.frames, engine_resident->frames)) << c << " " << r;
                EXPECT_TRUE(at::equal(got.audio, engine_resident->audio)) << c << " " << r;
            }
            if (route == ddo::Route::resident || route == ddo::Route::disk)
                compare("LTX-2.3 guided, " + c + " transformer, " + r + " route", got, want);
            ddo::test::expect_quantized_route(*cw, route, c, r, method, format, dynamic_streamed);
        }
    }
    EXPECT_EQ(seen.size(), expected.size()) << "a case is missing from " << (qdir / "reference.json").string();
}
