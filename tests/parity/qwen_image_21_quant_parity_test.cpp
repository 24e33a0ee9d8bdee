// qwen_image_21 on quantized transformers (issue 26) against diffusers (tools/reference/qwen_image_21_quant_fixtures.py):
// an SDNQ int8 and an SDNQ uint4 + SVD transformer (diffusers' own SDNQ integration) and a scaled-fp8 one (Lightricks'
// weight_scale layout; the reference runs the weights as ltx_core folds them), each from prompt embeddings to the
// denoised latents, with and without CFG. Tolerance: 1e-4 on the latents, as the dense ladder's (fp32; the
// dequantized weights are equal bit for bit, tests/parity/quant_dequant_parity_test.cpp). Every engine route gives
// latents bitwise equal to the resident reference, and the report counts the formats it streamed.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "block_source.hpp"
#include "cpu_plan.hpp"
#include "parity/parity_support.hpp"
#include "pipeline.hpp"
#include "qwen_image_21_run_options.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;
using ddo::test::expect_close;

namespace {

const fs::path kDir = QI21Q_FIXTURE_DIR;

class Qi21QuantParity : public ddo::test::ParitySuite {
protected:
    Qi21QuantParity() : ParitySuite(kDir, "qwen_image_21_quant_fixtures") {}
    const nlohmann::json & reference() const { return ddo::test::reference_of(kDir, "qwen_image_21_quant_fixtures"); }
};

TEST_F(Qi21QuantParity, QuantizedTransformersEqualDiffusersFromEmbeddingsToLatents) {
    const auto want = qi::TensorFile::open_file(kDir / "pipeline.safetensors");
    for (const auto & [c, opts] : reference().at("cases").items()) {
        const auto m = qi::ModelFiles::open(kDir / c);
        ASSERT_TRUE(m.transformer.quantized()) << c;
        const qi::Transformer transformer{m.transformer_config, qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
        const auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", m.transformer_config.context_in_dim);
        auto src = qi::make_resident_blocks(m.transformer, m.transformer_config, at::kFloat, at::kCPU);
        for (const auto & [run, r] : reference().at("runs").items()) {
            const auto latents = qi::denoise(m, transformer, *src, embeds, ddo::test::qwen_image_21_run_options(r));
            expect_close(c + " " + run + " latents", latents, want.read(c + "." + run + ".latents"), 1e-4);
        }
    }
}

TEST_F(Qi21QuantParity, EveryRouteStreamsTheStoredBytesAndEqualsResidentBitwise) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    for (const std::string c : {"sdnq_int8", "sdnq_uint4_svd", "fp8_scaled"}) {
        const auto m = qi::ModelFiles::open(kDir / c);
        const qi::Transformer transformer{m.transformer_config, qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
        const auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", m.transformer_config.context_in_dim);
        const auto o = ddo::test::qwen_image_21_run_options(reference().at("runs").at("cfg"));
        auto reference_src = qi::make_resident_blocks(m.transformer, m.transformer_config, at::kFloat, at::kCPU);
        const auto want = qi::denoise(m, transformer, *reference_src, embeds, o);
        for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                                 ddo::Route::group_leaf}) {
            const auto plan = ddo::test::cpu_plan("transformer", route, linear, route == ddo::Route::dynamic ? 1e-5 : 0);
            auto src = qi::make_engine_blocks(kDir / c / "transformer", m.transformer_config, at::kFloat, plan);
            const auto got = qi::denoise(m, transformer, *src, embeds, o);
            EXPECT_EQ(src->finish(), 0u);
            EXPECT_TRUE(at::equal(want, got)) << c << " route " << ddo::to_string(route) << " differs from resident";
            const auto q = src->report().at("quantization");
            const std::string format = c == "fp8_scaled" ? "FP8 E4M3 scaled" : c == "sdnq_int8" ? "SDNQ int8" : "SDNQ uint4";
            EXPECT_GT(q.at("formats").value(format, 0), 0) << q.dump();
            EXPECT_LT(q.at("stored_bytes").get<uint64_t>(), q.at("dense_bytes").get<uint64_t>()) << q.dump();
            EXPECT_GT(q.at("dequant_count").get<uint64_t>(), 0u) << q.dump();
            std::cout << "[ routes    ] " << c << " " << ddo::to_string(route) << " == resident bitwise; stored "
                      << q.at("stored_bytes") << " of " << q.at("dense_bytes") << " dense bytes, " << q.at("formats").dump()
                      << "\n";
        }
    }
}

}  // namespace
