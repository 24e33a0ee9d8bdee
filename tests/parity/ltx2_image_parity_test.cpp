// ltx2_image's pipeline against the composed LTX-2 image reference (tools/reference/ltx2_image_fixtures.py:
// diffusers 0.42.1's LTX-2 modules composed as the image variant; that script requires its transformer to equal
// the original implementation's LTX2ImageTransformer2DModel bitwise on shared weights and records the check, which
// the first test asserts). From the same prompt embeddings and seeded noise: the denoised latents and the image of
// a distilled run (8 distilled sigmas, no guidance), a base run (4 steps, CFG 3, rescale 0.7) and a base run with
// PAG 0.2 on block 1 (batch [neg; pos; pos]), and the base run on checkpoint_text from the embeddings diffusers'
// _get_gemma_prompt_embeds made of a prompt (the connectors of a 4-layer Gemma-3). Tolerances (fp32): latents 1e-4
// max abs, image 1/255 (pixel-equal). The DiT read through the offload engine on the resident, dynamic (one block
// streamed) and disk routes gives bitwise the latents of the plain resident source (tolerance 0). The base + PAG case
// on quantized transformers (SDNQ int8 and uint4 + SVD, scaled fp8, GGUF Q8_0 and Q4_K; tools/reference/
// ltx2_image_quant_fixtures.py) within the same tolerances, resident and on every engine route (bitwise equal to the
// engine's resident route).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "image_connectors.hpp"
#include "image_pipeline.hpp"
#include "image_transformer.hpp"
#include "parity/ltx2_parity_routes.hpp"
#include "parity/parity_support.hpp"
#include "video_denoise.hpp"
#include "video_vae_decoder.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_IMAGE_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_image_fixtures"); }

class Ltx2ImageParity : public ::testing::Test {
protected:
    void SetUp() override {
        ddo::test::announce_reference(reference());
    }
};

struct Outputs {
    at::Tensor latents, image;
};

// The case's checkpoint and prompt embeddings: the "text" case's are checkpoint_text and what diffusers encoded.
fs::path checkpoint_of(const std::string & name) { return kDir / (name == "text" ? "checkpoint_text" : "checkpoint"); }

// `dit_source` (borrowed): where the DiT's weights come from; nullptr: resident fp32 on the CPU. `ckpt`: another
// checkpoint than the case's (a quantized transformer's).
Outputs run_image(const std::string & name, lt::Weights * dit_source = nullptr, const fs::path & ckpt = {}) {
    const auto & k = reference().at("cases").at(name);
    const auto & s = k.at("settings");
    auto m = lt::ImageModel::open(ckpt.empty() ? checkpoint_of(name) : ckpt);
    lt::ResidentWeights resident(m.transformer, at::kFloat, at::kCPU), conn(m.connectors, at::kFloat, at::kCPU),
        vae(m.vae, at::kFloat, at::kCPU);
    lt::Weights & dit = dit_source ? *dit_source : resident;

    lt::ImageGuidance g;
    g.cfg = s.at("guidance_scale").get<double>();
    g.rescale = s.at("guidance_rescale").get<double>();
    g.pag = s.at("pag_scale").get<double>();
    g.pag_blocks = s.at("pag_blocks").get<std::vector<int64_t>>();
    const auto pe = TensorFile::open_file(kDir / (name == "text" ? "image_text.safetensors" : "prompt_embeds.safetensors"));
    const auto [embeds, mask] = lt::image_text_batch(g, pe.read("prompt_embeds"), pe.read("prompt_attention_mask"),
                                                     pe.read("negative_prompt_embeds"),
                                                     pe.read("negative_prompt_attention_mask"));
    const auto text = lt::image_connectors_forward(m.connectors_config, conn, embeds, mask);

    const auto geo = lt::image_geometry(m.vae_config, k.at("height").get<int64_t>(), k.at("width").get<int64_t>());
    const auto noise = lt::draw_image_noise(m.transformer_config.in_channels, geo, 1,
                                            uint64_t(reference().at("seed").get<int>()), at::kCPU);
    const auto sigmas = s.contains("sigmas") ? ddo::model::sigmas_from(s.at("sigmas").get<std::vector<double>>())
                                             : ddo::model::default_sigmas(s.at("steps").get<int>());
    const auto schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, geo.tokens());
    lt::ImageDenoiseSettings ds;
    ds.guidance = g;
    Outputs o;
    o.latents = lt::image_denoise(m.transformer_config, dit, text, geo, noise, schedule, ds);
    lt::VideoVaeDecoder decoder(m.vae_config, vae);
    o.image = lt::image_of(decoder.decode(lt::image_latents_for_decode(o.latents, geo, m.vae, m.vae_config)));
    return o;
}

void compare(const std::string & name, const std::string & label) {
    const auto o = run_image(name);
    const auto want = TensorFile::open_file(kDir / ("image_" + name + ".safetensors"));
    expect_close(label + ": latents", o.latents, want.read("latents"), 1e-4);
    expect_close(label + ": image", o.image, want.read("image"), 1.0 / 255);
}

}  // namespace

TEST_F(Ltx2ImageParity, ComposedReferenceEqualsOriginalImplementation) {
    const auto & c = reference().at("original_check");
    std::cout << "[ parity    ] " << c.at("what").get<std::string>() << ": max abs error "
              << c.at("max_abs_error").get<double>() << " (tolerance 0), " << c.at("keys").get<int>()
              << " tensors shared\n";
    EXPECT_EQ(c.at("max_abs_error").get<double>(), 0.0);
}

TEST_F(Ltx2ImageParity, Distilled) { compare("distilled", "LTX-2.3 image distilled (8 distilled sigmas)"); }

TEST_F(Ltx2ImageParity, BaseCfgRescale) { compare("base", "LTX-2.3 image base (4 steps, CFG 3, rescale 0.7)"); }

TEST_F(Ltx2ImageParity, BasePag) { compare("base_pag", "LTX-2.3 image base + PAG 0.2 on block 1"); }

TEST_F(Ltx2ImageParity, FromPromptEmbeddingsOfText) {
    compare("text", "LTX-2.3 image base from the embeddings of a prompt (4-layer Gemma-3)");
}

TEST_F(Ltx2ImageParity, DitRoutesGiveBitwiseEqualLatents) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_IMAGE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    const std::string name = "base_pag";  // CFG and PAG: every pass kind streams the blocks
    const auto want = run_image(name);
    ddo::test::expect_image_dit_routes_bitwise(checkpoint_of(name) / "transformer", linear, want,
                                               [&](lt::EngineWeights * ew) { return run_image(name, ew); }, "");
}

TEST_F(Ltx2ImageParity, TransformerSpecsMatchTheCheckpoint) {
    // The state dict the reference saved is exactly the specs (no audio key, nothing missing).
    const auto m = lt::ImageModel::open(kDir / "checkpoint");
    const auto specs = lt::image_transformer_specs(m.transformer_config);
    EXPECT_EQ(specs.size(), m.transformer.names().size());
    for (const auto & [name, shape] : specs) EXPECT_EQ(name.find("audio"), std::string::npos) << name;
}

// Issue 26: base + PAG on quantized transformers: SDNQ int8 and uint4 + SVD (diffusers' own SDNQ integration on the
// composed model class), scaled fp8 (the reference runs the weights as ltx_core folds them) and GGUF Q8_0 and Q4_K
// (gguf-py's decode run dense; Q4_K only where rows are whole 256-blocks: the timestep embedders). Latents 1e-4,
// image 1/255 against the reference, resident and on the disk route; every engine route bitwise equal to the
// engine's resident route; the report names the stored format.
TEST_F(Ltx2ImageParity, QuantizedTransformersEqualTheReference) {
    const fs::path qdir = LTX2_IMAGE_QUANT_FIXTURE_DIR;
    const auto & qref = ddo::test::reference_of(qdir, "ltx2_image_quant_fixtures");
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_IMAGE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    const auto name = qref.at("case").get<std::string>();
    ASSERT_EQ(qref.at("settings"), reference().at("cases").at(name).at("settings")) << "the quantized cases run " << name;
    const std::map<std::string, std::pair<std::string, std::string>> expected = {
        {"sdnq_int8", {"sdnq", "SDNQ int8"}},
        {"sdnq_uint4_svd", {"sdnq", "SDNQ uint4"}},
        {"fp8_scaled", {"fp8", "FP8 E4M3 scaled"}},
        {"gguf_q8_0", {"gguf", "Q8_0"}},
        {"gguf_q4_k", {"gguf", "Q4_K"}}};
    std::set<std::string> seen;
    for (const auto & [c, facts] : qref.at("cases").items()) {
        ASSERT_TRUE(expected.count(c)) << "a case this test does not know: " << c;
        seen.insert(c);
        const auto & [method, format] = expected.at(c);
        const auto ckpt = qdir / ("checkpoint_" + c);
        const auto tf = TensorFile::open_component(ckpt / "transformer");
        ASSERT_TRUE(tf.quantized()) << c;
        const auto want = TensorFile::open_file(qdir / ("image_" + c + ".safetensors"));
        const std::string label = "LTX-2.3 image base + PAG, " + c + " transformer";
        const auto resident = run_image(name, nullptr, ckpt);
        expect_close(label + ", resident: latents", resident.latents, want.read("latents"), 1e-4);
        expect_close(label + ", resident: image", resident.image, want.read("image"), 1.0 / 255);

        const auto tc = lt::image_transformer_config_from_file(ckpt / "transformer" / "config.json");
        const auto groups = lt::image_transformer_groups(tc);
        uint64_t resident_bytes = 0;  // stored bytes of the globals and block 0: block 1 streams on the dynamic route
        for (const auto & g : groups)
            if (g.name != "transformer_blocks.1")
                for (const auto & n : g.tensors) resident_bytes += tf.nbytes_of(n);
        std::optional<Outputs> engine_resident;
        uint64_t dynamic_streamed = 0;
        for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                                 ddo::Route::group_leaf}) {
            const std::string r = ddo::to_string(route);
            const double gb = route == ddo::Route::dynamic ? double(resident_bytes + 1024) / 1073741824.0 : 0;
            auto cw = ddo::model::ComponentWeights::open(ckpt / "transformer", groups,
                                                         ddo::test::cpu_plan("transformer", route, linear, gb),
                                                         at::kFloat);
            lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
            const auto got = run_image(name, &ew, ckpt);
            EXPECT_EQ(cw->finish(), 0u) << c << " " << r << ": outstanding owners at the end of the phase";
            EXPECT_EQ(cw->route(), r);
            if (!engine_resident) {
                engine_resident = got;
            } else {
                EXPECT_TRUE(at::equal(got.latents, engine_resident->latents))
                    << c << " " << r << ": latents differ from the engine's resident route's by up to "
                    << (got.latents - engine_resident->latents).abs().max().item<double>();
                EXPECT_TRUE(at::equal(got.image, engine_resident->image)) << c << " " << r << ": image differs";
            }
            if (route == ddo::Route::resident || route == ddo::Route::disk) {
                expect_close(label + ", " + r + " route: latents", got.latents, want.read("latents"), 1e-4);
                expect_close(label + ", " + r + " route: image", got.image, want.read("image"), 1.0 / 255);
            }
            ddo::test::expect_quantized_route(*cw, route, c, r, method, format, dynamic_streamed);
        }
    }
    EXPECT_EQ(seen.size(), expected.size()) << "a case is missing from " << (qdir / "reference.json").string();
}
