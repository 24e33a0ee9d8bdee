// The ltx2_video two-stage run against diffusers' documented distilled composition
// (tools/reference/ltx2_two_stage_fixtures.py): stage 1 at half size on DISTILLED_SIGMA_VALUES, the latent upsampler
// (LTX2LatentUpsamplePipeline), stage 2 on STAGE_2_DISTILLED_SIGMA_VALUES with the stage-1 audio, both noised to the
// first stage-2 sigma from the generator stage 1 drew from; text-to-video (LTX2Pipeline) and image-to-video
// (LTX2ImageToVideoPipeline, latent frame 0 of the upscaled latents kept clean). Each stage's latents, the upscaled
// latents, the final frames and waveform. Tolerances (fp32): latents and waveform 1e-4 max abs, frames 1/255.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "audio_vae_decoder.hpp"
#include "connectors.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latent_upsampler.hpp"
#include "latents.hpp"
#include "parity/parity_support.hpp"
#include "video_conditions.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"
#include "video_two_stage.hpp"
#include "video_vae_decoder.hpp"
#include "vocoder_bwe.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_TWO_STAGE_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_two_stage_fixtures"); }

class Ltx2TwoStageParity : public ddo::test::ParitySuite {
protected:
    Ltx2TwoStageParity() : ParitySuite(kDir, "ltx2_two_stage_fixtures") {}
};

void run_and_compare(const std::string & name) {
    const auto & ref = reference();
    const auto want = TensorFile::open_file(kDir / (name + ".safetensors"));
    const bool i2v = ref.at("cases").at(name).at("pipeline") == "LTX2ImageToVideoPipeline";
    auto m = lt::VideoModel::open(kDir / "checkpoint");
    lt::ResidentWeights dit(m.transformer, at::kFloat, at::kCPU), conn(m.connectors, at::kFloat, at::kCPU);
    lt::ResidentWeights vae(m.vae, at::kFloat, at::kCPU), avae(m.audio_vae, at::kFloat, at::kCPU);
    lt::ResidentWeights voc(m.vocoder, at::kFloat, at::kCPU);
    auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    const auto text = lt::connectors_forward(
        m.connectors_config, conn, at::cat({pe.read("negative_prompt_embeds"), pe.read("prompt_embeds")}),
        at::cat({pe.read("negative_prompt_attention_mask"), pe.read("prompt_attention_mask")}));

    // The recipe's settings: guidance_scale 1, every other scale the pipeline's default (audio CFG 7 runs the CFG
    // batch; STG on block 28, which this 2-block DiT does not have; modality isolation 3; rescale 0.7).
    lt::DenoiseSettings ds;
    ds.video = {ref.at("guidance_scale").get<double>(), 1.0, 3.0, 0.7};
    ds.audio = {7.0, 1.0, 3.0, 0.7};
    ds.stg_blocks = {28};
    ds.use_cross_timestep = true;
    ds.fps = ref.at("frame_rate").get<double>();
    const auto r = m.ratios();
    const int64_t W = ref.at("width"), H = ref.at("height"), F = ref.at("frames");
    const auto g1 = lt::latent_geometry(r, F, H / 2, W / 2, ds.fps);
    const auto g2 = lt::latent_geometry(r, F, H, W, ds.fps);
    const auto stats = lt::read_video_latent_stats(m.vae, m.vae_config);
    const double sf = m.vae_config.scaling_factor;
    auto denorm = [&](const at::Tensor & packed, const lt::LatentGeometry & g) {
        return lt::denormalize_video_latents(lt::unpack_video(packed, g), stats.mean, stats.std, sf)[0];
    };

    // Stage 1.
    auto gen = lt::noise_generator(uint64_t(ref.at("seed").get<int>()));
    lt::ConditionedStart s1;
    if (i2v) {
        s1 = lt::first_frame_start(want.read("image_latents"), r, g1, 1, gen, at::kCPU);
    } else {
        const auto n = lt::draw_noise(r, g1, 1, gen, at::kCPU);
        s1.video = n.video;
        s1.audio = n.audio;
    }
    const auto sched1 = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json,
                                          ddo::model::sigmas_from(ref.at("stage1_sigmas").get<std::vector<double>>()),
                                          g1.video_tokens());
    const auto d1 = lt::denoise(m.transformer_config, dit, text, g1, {s1.video, s1.audio}, sched1, ds, {},
                                i2v ? &s1.conditioning : nullptr);
    expect_close(name + ": stage 1 latents", denorm(d1.video, g1), want.read("stage1_latents"), 1e-4);

    // The upsampler.
    const auto up_dir = kDir / "checkpoint" / "latent_upsampler";
    const auto up_file = TensorFile::open_component(up_dir);
    const auto up_cfg = lt::LatentUpsamplerConfig::load(up_dir);
    lt::ResidentWeights up_w(up_file, at::kFloat, at::kCPU);
    const lt::LatentUpsampler up(up_cfg, up_w);
    const auto upscaled = lt::upsample_video_latents(up, d1.video, g1.latent_frames, g1.latent_height, g1.latent_width,
                                                     stats, sf);
    expect_close(name + ": upscaled latents (de-normalised)",
                 lt::denormalize_video_latents(upscaled, stats.mean, stats.std, sf)[0], want.read("upscaled"), 1e-4);

    // Stage 2.
    const auto s2 = lt::stage2_start(upscaled, d1.audio, avae, g2,
                                     ref.at("stage2_sigmas").at(0).get<double>(), i2v, gen, at::kCPU);
    const auto sched2 = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json,
                                          ddo::model::sigmas_from(ref.at("stage2_sigmas").get<std::vector<double>>()),
                                          g2.video_tokens());
    const auto d2 = lt::denoise(m.transformer_config, dit, text, g2, {s2.video, s2.audio}, sched2, ds, {},
                                i2v ? &s2.conditioning : nullptr);
    const auto z = lt::denormalize_video_latents(lt::unpack_video(d2.video, g2), stats.mean, stats.std, sf);
    expect_close(name + ": stage 2 latents", z[0], want.read("latents"), 1e-4);
    const auto a = lt::unpack_audio_latents(lt::denormalize_audio_latents(avae, d2.audio),
                                            m.audio_vae_config.latent_mel_bins());
    expect_close(name + ": stage 2 audio latents", a[0], want.read("audio_latents"), 1e-4);
    const auto video = lt::VideoVaeDecoder(m.vae_config, vae).decode(z);
    expect_close(name + ": frames", (video[0] / 2 + 0.5).clamp(0, 1).permute({1, 0, 2, 3}), want.read("frames"),
                 1.0 / 255);
    ASSERT_TRUE(m.vocoder_bwe_config.has_value());
    const auto mel = lt::AudioVaeDecoder(m.audio_vae_config).decode(avae, a);
    expect_close(name + ": waveform", lt::VocoderWithBwe(*m.vocoder_bwe_config).forward(voc, mel)[0],
                 want.read("audio"), 1e-4);
}

}  // namespace

TEST_F(Ltx2TwoStageParity, TextToVideoDistilled) { run_and_compare("t2v"); }

TEST_F(Ltx2TwoStageParity, ImageToVideoDistilled) { run_and_compare("i2v"); }
