// ltx2_image img2img against the composed reference (tools/reference/ltx2_image_img2img_fixtures.py: diffusers
// 0.42.1's modules composed as DEVAIEXP's LTX2ImageImg2ImgPipeline, checked there bitwise against the original's
// order of operations on the same weights, which the first test asserts; Note [LTX-2 image img2img]). On the tiny
// LTX-2.3 image checkpoint, 8 steps at strengths 0.2 (2 kept steps) and 0.6 (5 kept steps), no guidance (the
// distilled run): the strength's slice of the sigma grid and the shifted schedule (bitwise), the two draws of the
// run's generator (bitwise), the posterior sample normalised (1e-6), scale_noise's start (bitwise), the denoised
// latents (1e-4 max abs) and the image (1/255), from the reference's encoder moments and from the input PNG (read_image,
// rgb_of, PIL's LANCZOS resize, image_to_tensor, the video VAE's encode_moments: each step against the reference's
// tensor). The DiT on the resident, dynamic (one block streamed) and disk routes gives bitwise the latents of the
// plain resident source.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/media/image_reader.hpp"
#include "ddo/media/image_resize.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/condition_image.hpp"
#include "ddo/model/tensor_file.hpp"
#include "image_connectors.hpp"
#include "image_pipeline.hpp"
#include "image_transformer.hpp"
#include "parity/ltx2_parity_routes.hpp"
#include "parity/parity_support.hpp"
#include "video_denoise.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_encoder.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_IMAGE_IMG2IMG_FIXTURE_DIR;
const char * const kTarget = "ltx2_image_img2img_fixtures";

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, kTarget); }

class Ltx2ImageImg2ImgParity : public ddo::test::ParitySuite {
protected:
    Ltx2ImageImg2ImgParity() : ParitySuite(kDir, kTarget) {}
};

struct Outputs {
    at::Tensor start, latents, image;
    ddo::model::FlowMatchSchedule schedule;
};

// The input PNG as the original hands it to the VAE: decoded, RGB, resized with PIL's LANCZOS to height x width,
// [1, 3, H, W] in [-1, 1].
at::Tensor input_pixels(int64_t height, int64_t width) {
    const auto rgb = ddo::model::rgb_of(ddo::media::read_image(kDir / "input.png"));
    const auto resized = ddo::media::resize_like_pil(rgb, int(width), int(height), ddo::media::ResampleFilter::lanczos);
    return ddo::model::image_to_tensor(resized);
}

// The video VAE's encoder moments of `pixels` ([1, 3, H, W]), resident fp32.
at::Tensor encoder_moments(const lt::ImageModel & m, lt::Weights & vae, const at::Tensor & pixels) {
    lt::VideoVaeEncoder encoder(m.vae_config, vae);
    return encoder.encode_moments(pixels.unsqueeze(2));
}

// The case's run from the reference's encoder moments, or (from_png) from the input PNG through ddo's reading,
// resize and encoder. `dit_source` (borrowed): where the DiT's weights come from; nullptr: resident fp32 on the CPU.
Outputs run_img2img(const std::string & name, lt::Weights * dit_source = nullptr, bool from_png = false) {
    const auto & k = reference().at("cases").at(name);
    auto m = lt::ImageModel::open(kDir / "checkpoint");
    lt::ResidentWeights resident(m.transformer, at::kFloat, at::kCPU), conn(m.connectors, at::kFloat, at::kCPU),
        vae(m.vae, at::kFloat, at::kCPU);
    lt::Weights & dit = dit_source ? *dit_source : resident;

    lt::ImageGuidance g;  // the distilled run: no CFG, no PAG
    g.cfg = k.at("guidance_scale").get<double>();
    g.pag = k.at("pag_scale").get<double>();
    const auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    const auto [embeds, mask] = lt::image_text_batch(g, pe.read("prompt_embeds"), pe.read("prompt_attention_mask"),
                                                     pe.read("negative_prompt_embeds"),
                                                     pe.read("negative_prompt_attention_mask"));
    const auto text = lt::image_connectors_forward(m.connectors_config, conn, embeds, mask);

    const auto geo = lt::image_geometry(m.vae_config, k.at("height").get<int64_t>(), k.at("width").get<int64_t>());
    const auto strength = lt::strength_sigmas(k.at("steps").get<int>(), k.at("strength").get<double>());
    Outputs o;
    o.schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, strength.sigmas, geo.tokens());
    const auto draws = lt::draw_img2img_noise(m.transformer_config.in_channels, geo, 1,
                                              uint64_t(reference().at("seed").get<int>()), at::kFloat);
    const auto want = TensorFile::open_file(kDir / ("img2img_" + name + ".safetensors"));
    const auto moments = from_png ? encoder_moments(m, vae, input_pixels(geo.height, geo.width)) : want.read("moments");
    const auto x0 = lt::normalize_image_latents(lt::posterior_sample(moments, draws.posterior_eps), m.vae, m.vae_config);
    o.start = lt::img2img_start(x0, draws.noise, o.schedule);
    lt::ImageDenoiseSettings ds;
    ds.guidance = g;
    o.latents = lt::image_denoise(m.transformer_config, dit, text, geo, o.start, o.schedule, ds);
    lt::VideoVaeDecoder decoder(m.vae_config, vae);
    o.image = lt::image_of(decoder.decode(lt::image_latents_for_decode(o.latents, geo, m.vae, m.vae_config)));
    return o;
}

at::Tensor floats(const std::vector<float> & v) {
    return at::from_blob(const_cast<float *>(v.data()), {int64_t(v.size())}, at::kFloat).clone();
}

}  // namespace

TEST_F(Ltx2ImageImg2ImgParity, ComposedReferenceEqualsTheOriginalOrder) {
    for (const auto & [name, c] : reference().at("original_check").items()) {
        std::cout << "[ parity    ] " << name << ": composed vs the original's order (t_start " << c.at("t_start")
                  << "): " << c.at("equal").dump() << "\n";
        EXPECT_TRUE(c.at("all_equal").get<bool>()) << name << ": " << c.dump();
    }
}

TEST_F(Ltx2ImageImg2ImgParity, StrengthSlicesTheGridAsTheOriginal) {
    for (const auto & [name, k] : reference().at("cases").items()) {
        const int steps = k.at("steps").get<int>();
        const auto s = lt::strength_sigmas(steps, k.at("strength").get<double>());
        EXPECT_EQ(s.t_start, k.at("t_start").get<int>()) << name;
        EXPECT_EQ(int(s.sigmas.size()), k.at("kept_steps").get<int>()) << name;
        const auto grid = ddo::model::default_sigmas(steps);
        for (size_t i = 0; i < s.sigmas.size(); ++i) EXPECT_EQ(s.sigmas[i], grid[size_t(s.t_start) + i]) << name;
    }
    // Any strength > 0 keeps at least one step; the ends of (0, 1].
    EXPECT_EQ(lt::strength_sigmas(8, 1.0).t_start, 0);
    EXPECT_EQ(lt::strength_sigmas(8, 1.0).sigmas.size(), 8u);
    EXPECT_EQ(lt::strength_sigmas(8, 1e-9).sigmas.size(), 1u);
    EXPECT_EQ(lt::strength_sigmas(8, 0.55).t_start, 3);  // 8 - 4.4 = 3.6 -> 3 (the blocks' default strength)
    for (const double bad : {0.0, -0.2, 1.0000001, 2.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
        const auto e = ddo::test::error_of([&] { lt::strength_sigmas(8, bad, "--strength"); });
        EXPECT_NE(e.find("usage: --strength = "), std::string::npos) << bad << ": " << e;
        EXPECT_NE(e.find("(0, 1]"), std::string::npos) << e;
    }
    EXPECT_NE(ddo::test::error_of([] { lt::strength_sigmas(0, 0.5); }).find("usage: "), std::string::npos);
}

TEST_F(Ltx2ImageImg2ImgParity, ScheduleDrawsAndStartEqualTheReference) {
    for (const auto & [name, k] : reference().at("cases").items()) {
        const auto want = TensorFile::open_file(kDir / ("img2img_" + name + ".safetensors"));
        auto m = lt::ImageModel::open(kDir / "checkpoint");
        const auto geo = lt::image_geometry(m.vae_config, k.at("height").get<int64_t>(), k.at("width").get<int64_t>());
        const auto s = lt::strength_sigmas(k.at("steps").get<int>(), k.at("strength").get<double>());
        const auto schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, s.sigmas, geo.tokens());
        EXPECT_TRUE(at::equal(floats(schedule.sigmas), want.read("sigmas")))
            << name << ": sigmas " << floats(schedule.sigmas) << " vs " << want.read("sigmas");
        EXPECT_TRUE(at::equal(floats(schedule.timesteps), want.read("timesteps"))) << name << ": timesteps";

        const auto d = lt::draw_img2img_noise(m.transformer_config.in_channels, geo, 1,
                                              uint64_t(reference().at("seed").get<int>()), at::kFloat);
        EXPECT_TRUE(at::equal(d.posterior_eps, want.read("posterior_eps"))) << name << ": the posterior's draw";
        EXPECT_TRUE(at::equal(d.noise, want.read("noise"))) << name << ": the latent noise (the second draw)";
        const auto x0 = lt::normalize_image_latents(lt::posterior_sample(want.read("moments"), d.posterior_eps), m.vae,
                                                    m.vae_config);
        expect_close(name + ": the posterior sample, normalised", x0, want.read("image_latents"), 1e-6);
        const auto start = lt::img2img_start(want.read("image_latents"), want.read("noise"), schedule);
        const double e = ddo::test::max_abs(start, want.read("noised"), name);
        std::cout << "[ parity    ] " << name << ": scale_noise at sigma " << schedule.sigmas.front()
                  << ": max abs error " << e << " (tolerance 0)\n";
        EXPECT_EQ(e, 0.0) << name;
    }
}

TEST_F(Ltx2ImageImg2ImgParity, TheInputPngReadResizedAndEncodedEqualsTheReference) {
    const auto want = TensorFile::open_file(kDir / "img2img_s020.safetensors");
    const auto rgb = ddo::model::rgb_of(ddo::media::read_image(kDir / "input.png"));
    const auto & k = reference().at("cases").at("s020");
    const int h = k.at("height").get<int>(), w = k.at("width").get<int>();
    const auto resized = ddo::media::resize_like_pil(rgb, w, h, ddo::media::ResampleFilter::lanczos);
    const auto want_rgb = want.read("resized_rgb").contiguous();
    ASSERT_EQ(resized.pixels.size(), size_t(want_rgb.numel()));
    const auto got_rgb = at::from_blob(const_cast<uint8_t *>(resized.pixels.data()), want_rgb.sizes(), at::kByte);
    const double e_rgb = ddo::test::max_abs(got_rgb, want_rgb, "resized");
    std::cout << "[ parity    ] input.png (" << rgb.height << "x" << rgb.width << ") resized like PIL LANCZOS to "
              << h << "x" << w << ": max abs error " << e_rgb << " (tolerance 0)\n";
    EXPECT_EQ(e_rgb, 0.0);
    const auto pixels = ddo::model::image_to_tensor(resized);
    const double e_px = ddo::test::max_abs(pixels, want.read("pixels"), "pixels");
    std::cout << "[ parity    ] VaeImageProcessor.preprocess: max abs error " << e_px << " (tolerance 0)\n";
    EXPECT_EQ(e_px, 0.0);
    auto m = lt::ImageModel::open(kDir / "checkpoint");
    lt::ResidentWeights vae(m.vae, at::kFloat, at::kCPU);
    expect_close("the video VAE's encode_moments (means, the log-variance repeated)", encoder_moments(m, vae, pixels),
                 want.read("moments"), 1e-5);
}

TEST_F(Ltx2ImageImg2ImgParity, FromThePngBothStrengths) {
    for (const char * name : {"s020", "s060"}) {
        const auto o = run_img2img(name, nullptr, true);
        const auto want = TensorFile::open_file(kDir / (std::string("img2img_") + name + ".safetensors"));
        const std::string label = std::string("img2img ") + name + " from input.png";
        expect_close(label + ": latents", o.latents, want.read("latents"), 1e-4);
        expect_close(label + ": image", o.image, want.read("image"), 1.0 / 255);
    }
}

TEST_F(Ltx2ImageImg2ImgParity, Strength020) {
    const auto o = run_img2img("s020");
    const auto want = TensorFile::open_file(kDir / "img2img_s020.safetensors");
    expect_close("LTX-2.3 image img2img, strength 0.2 (2 of 8 steps): latents", o.latents, want.read("latents"), 1e-4);
    expect_close("LTX-2.3 image img2img, strength 0.2: image", o.image, want.read("image"), 1.0 / 255);
}

TEST_F(Ltx2ImageImg2ImgParity, Strength060) {
    const auto o = run_img2img("s060");
    const auto want = TensorFile::open_file(kDir / "img2img_s060.safetensors");
    expect_close("LTX-2.3 image img2img, strength 0.6 (5 of 8 steps): latents", o.latents, want.read("latents"), 1e-4);
    expect_close("LTX-2.3 image img2img, strength 0.6: image", o.image, want.read("image"), 1.0 / 255);
}

TEST_F(Ltx2ImageImg2ImgParity, DitRoutesGiveBitwiseEqualLatents) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_IMAGE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    const std::string name = "s060";
    const auto want = run_img2img(name);
    ddo::test::expect_image_dit_routes_bitwise(kDir / "checkpoint" / "transformer", linear, want,
                                               [&](lt::EngineWeights * ew) { return run_img2img(name, ew); },
                                               "img2img 0.6, ");
}
