// LTX-2 image conditioning against diffusers (tools/reference/ltx2_conditioning_fixtures.py): LTX2ImageToVideoPipeline
// (a still on latent frame 0: per-token timesteps, frame 0 out of the Euler update) on the plain LTX-2.0 and the
// fully guided LTX-2.3 tiny checkpoints, and LTX2ConditionPipeline (a still at frame 0 with strength 1 plus a keyframe
// at the last latent frame with strength 0.8, appended with its own RoPE coordinates; a keyframe alone at latent
// frame 1) -- from the reference's condition latents, the same prompt embeddings and the pipelines' own seeded noise:
// denoised latents, decoded frames, waveform. The DiT on the engine's routes gives bitwise the same latents.
// Tolerances (fp32): latents and waveform 1e-4 max abs, frames 1/255; routes bitwise among themselves.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "audio_vae_decoder.hpp"
#include "connectors.hpp"
#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latents.hpp"
#include "parity/parity_support.hpp"
#include "transformer.hpp"
#include "video_conditions.hpp"
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

const fs::path kDir = LTX2_CONDITIONING_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_conditioning_fixtures"); }

class Ltx2ConditioningParity : public ddo::test::ParitySuite {
protected:
    Ltx2ConditioningParity() : ParitySuite(kDir, "ltx2_conditioning_fixtures") {}
};

double num(const nlohmann::json & s, const char * k) { return s.at(k).get<double>(); }

struct Outputs {
    at::Tensor video_latents, audio_latents;  // de-normalised, unpacked, sample 0 (output_type="latent")
    at::Tensor frames, audio;                 // [F, 3, H, W] in [0, 1], [2, samples] (output_type="pt")
};

// The case's conditioned start from the reference's condition latents (the encoder has its own rung).
lt::ConditionedStart start_of(const std::string & name, const lt::LatentRatios & r, const lt::LatentGeometry & g,
                              const nlohmann::json & settings, const TensorFile & want) {
    const auto & conds = reference().at("cases").at(name).at("conditions");
    const auto seed = uint64_t(reference().at("seed").get<int>());
    if (conds.at(0).value("pipeline", "") == "LTX2ImageToVideoPipeline")
        return lt::first_frame_start(want.read("image_latents"), r, g, 1, seed, at::kCPU);
    std::vector<lt::LatentCondition> lc;
    for (size_t i = 0; i < conds.size(); ++i) {
        int64_t index = conds[i].at("index").get<int64_t>();
        if (index < 0) index = ((index % g.latent_frames) + g.latent_frames) % g.latent_frames;
        lc.push_back({want.read("cond" + std::to_string(i) + ".latents"), index, 1, conds[i].at("strength").get<double>()});
    }
    // noise_scale: sigmas[0] when sigmas are given, else 1 (LTX2ConditionPipeline.__call__).
    const double noise_scale = settings.contains("sigmas") ? settings.at("sigmas").at(0).get<double>() : 1.0;
    return lt::blend_start(lc, r, g, noise_scale, num(settings, "frame_rate"), 1, seed, at::kCPU);
}

Outputs run_case(const std::string & name, lt::Weights * dit_source = nullptr) {
    const auto & c = reference().at("cases").at(name);
    const auto want = TensorFile::open_file(kDir / (name + ".safetensors"));
    auto m = lt::VideoModel::open(kDir / c.at("checkpoint").get<std::string>());
    const auto & tc = m.transformer_config;
    lt::ResidentWeights resident_dit(m.transformer, at::kFloat, at::kCPU), conn(m.connectors, at::kFloat, at::kCPU);
    lt::Weights & dit = dit_source ? *dit_source : resident_dit;
    lt::ResidentWeights vae(m.vae, at::kFloat, at::kCPU), avae(m.audio_vae, at::kFloat, at::kCPU);
    lt::ResidentWeights voc(m.vocoder, at::kFloat, at::kCPU);

    const bool negative = c.at("negative").get<bool>();
    auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    auto embeds = pe.read("prompt_embeds"), mask = pe.read("prompt_attention_mask");
    if (negative) {
        embeds = at::cat({pe.read("negative_prompt_embeds"), embeds});
        mask = at::cat({pe.read("negative_prompt_attention_mask"), mask});
    }
    const auto text = lt::connectors_forward(m.connectors_config, conn, embeds, mask);

    const auto & s = c.at("settings");
    const auto r = m.ratios();
    const auto g = lt::latent_geometry(r, s.at("num_frames").get<int64_t>(), s.at("height").get<int64_t>(),
                                       s.at("width").get<int64_t>(), num(s, "frame_rate"));
    auto start = start_of(name, r, g, s, want);
    std::vector<float> sigmas;
    if (s.contains("sigmas")) sigmas = ddo::model::sigmas_from(s.at("sigmas").get<std::vector<double>>());
    else sigmas = ddo::model::default_sigmas(s.at("num_inference_steps").get<int>());
    // mu from the sequence the pipeline denoises (appended keyframe tokens included).
    const auto schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, start.video.size(1));

    lt::DenoiseSettings ds;
    ds.video = {num(s, "guidance_scale"), num(s, "stg_scale"), num(s, "modality_scale"), num(s, "guidance_rescale")};
    ds.audio = {num(s, "audio_guidance_scale"), num(s, "audio_stg_scale"), num(s, "audio_modality_scale"),
                num(s, "audio_guidance_rescale")};
    if (!s.at("spatio_temporal_guidance_blocks").is_null())
        ds.stg_blocks = s.at("spatio_temporal_guidance_blocks").get<std::vector<int64_t>>();
    ds.use_cross_timestep = s.at("use_cross_timestep").get<bool>();
    ds.fps = num(s, "frame_rate");
    auto d = lt::denoise(tc, dit, text, g, {start.video, start.audio}, schedule, ds, {}, &start.conditioning);

    Outputs o;
    const auto stats = lt::read_video_latent_stats(m.vae, m.vae_config);
    const auto z = lt::denormalize_video_latents(lt::unpack_video(d.video, g), stats.mean, stats.std,
                                                 m.vae_config.scaling_factor);
    o.video_latents = z[0];
    const auto a = lt::unpack_audio_latents(lt::denormalize_audio_latents(avae, d.audio),
                                            m.audio_vae_config.latent_mel_bins());
    o.audio_latents = a[0];
    const auto video = lt::VideoVaeDecoder(m.vae_config, vae).decode(z);
    o.frames = (video[0] / 2 + 0.5).clamp(0, 1).permute({1, 0, 2, 3});
    const auto mel = lt::AudioVaeDecoder(m.audio_vae_config).decode(avae, a);
    o.audio = (m.vocoder_bwe_config ? lt::VocoderWithBwe(*m.vocoder_bwe_config).forward(voc, mel)
                                    : lt::Vocoder(*m.vocoder_config).forward(voc, mel))[0];
    return o;
}

void compare(const std::string & label, const Outputs & o, const std::string & name) {
    const auto want = TensorFile::open_file(kDir / (name + ".safetensors"));
    expect_close(label + ": video latents", o.video_latents, want.read("latents"), 1e-4);
    expect_close(label + ": audio latents", o.audio_latents, want.read("audio_latents"), 1e-4);
    expect_close(label + ": frames", o.frames, want.read("frames"), 1.0 / 255);
    expect_close(label + ": waveform", o.audio, want.read("audio"), 1e-4);
}

}  // namespace

TEST_F(Ltx2ConditioningParity, ImageToVideoPlain20) {
    const auto o = run_case("i2v_20");
    compare("I2V LTX-2.0 plain", o, "i2v_20");
    // Latent frame 0 left the loop as it entered: the still's latents, de-normalised (scaling factor 1 both ways).
    const auto m = lt::VideoModel::open(kDir / "checkpoint_20");
    const auto stats = lt::read_video_latent_stats(m.vae, m.vae_config);
    const auto still = TensorFile::open_file(kDir / "i2v_20.safetensors").read("image_latents");
    const auto want0 = lt::denormalize_video_latents(still, stats.mean, stats.std, 1.0)[0].select(1, 0);
    expect_close("I2V: latent frame 0 is the still's", o.video_latents.select(1, 0), want0, 1e-6);
}

TEST_F(Ltx2ConditioningParity, ImageToVideoGuided23) { compare("I2V LTX-2.3 guided", run_case("i2v_23"), "i2v_23"); }

TEST_F(Ltx2ConditioningParity, ConditionsWithKeyframeGuided23) {
    compare("conditions (frame 0 + last-frame keyframe 0.8) LTX-2.3 guided", run_case("cond_23"), "cond_23");
}

TEST_F(Ltx2ConditioningParity, KeyframeAlonePlain20) {
    compare("keyframe at latent 1 LTX-2.0 plain", run_case("kf_20"), "kf_20");
}

TEST_F(Ltx2ConditioningParity, KeyframeCoordinates) {
    // _prepare_keyframe_coords for a one-frame keyframe at pixel frame 9 (latent 2 of an 8x VAE), 24 fps.
    lt::LatentRatios r;
    const auto c = lt::keyframe_coords(r, 1, 2, 3, lt::pixel_frame_of(r, 2), 1, 24.0);
    ASSERT_EQ(c.sizes(), (at::IntArrayRef{1, 3, 6, 2}));
    EXPECT_FLOAT_EQ(c[0][0][0][0].item<float>(), 9.0f / 24);
    EXPECT_FLOAT_EQ(c[0][0][0][1].item<float>(), 10.0f / 24);  // [idx, idx + 1)
    EXPECT_FLOAT_EQ(c[0][1][5][0].item<float>(), 32.0f);       // h = 1 -> 32 px
    EXPECT_FLOAT_EQ(c[0][2][5][1].item<float>(), 96.0f);       // w = 2 -> [64, 96)
    EXPECT_EQ(lt::latent_index_of(r, 9), std::optional<int64_t>(2));
    EXPECT_EQ(lt::latent_index_of(r, 8), std::nullopt);
    EXPECT_EQ(lt::latent_index_of(r, 0), std::optional<int64_t>(0));
}

TEST_F(Ltx2ConditioningParity, DitRoutesGiveBitwiseEqualLatents) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_CONDITIONING_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    const std::string name = "cond_23";  // keyframe tokens, per-token timesteps, every pass kind
    const fs::path ckpt = kDir / reference().at("cases").at(name).at("checkpoint").get<std::string>();
    const auto tc = lt::TransformerConfig::from_file(ckpt / "transformer" / "config.json");
    const auto groups = lt::transformer_groups(tc);
    const auto tf = TensorFile::open_component(ckpt / "transformer");
    uint64_t block_bytes = 0;
    for (const auto & g : groups)
        if (g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) block_bytes += tf.nbytes_of(n);
    std::optional<Outputs> first;
    for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk}) {
        const double gb = route == ddo::Route::dynamic ? double(block_bytes + 1024) / 1073741824.0 : 0;
        auto cw = ddo::model::ComponentWeights::open(ckpt / "transformer", groups,
                                                     ddo::test::cpu_plan("transformer", route, linear, gb), at::kFloat);
        lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
        const auto got = run_case(name, &ew);
        EXPECT_EQ(cw->finish(), 0u);
        compare(std::string("conditions, transformer on ") + ddo::to_string(route), got, name);
        if (!first) first = got;
        else {
            EXPECT_TRUE(at::equal(got.video_latents, first->video_latents)) << ddo::to_string(route);
            EXPECT_TRUE(at::equal(got.audio, first->audio)) << ddo::to_string(route);
        }
    }
}
