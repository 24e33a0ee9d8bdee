// qwen_image_21 on quantized transformers (issue 26) against diffusers (tools/reference/qwen_image_21_quant_fixtures.py):
// an SDNQ int8 and an SDNQ uint4 + SVD transformer (diffusers' own SDNQ integration), a scaled-fp8 one (Lightricks'
// weight_scale layout; the reference runs the weights as ltx_core folds them) and GGUF Q8_0 and Q4_K ones (written by
// gguf-py; the reference runs gguf-py's decode of the file dense), each from prompt embeddings to the denoised
// latents, with and without CFG. Tolerance: 1e-4 on the latents, as the dense ladder's (fp32; the dequantized weights
// are equal bit for bit, tests/parity/quant_dequant_parity_test.cpp). Every engine route gives latents bitwise equal
// to the resident reference, and the report counts the formats it streamed. The GGUF file named by itself
// (--transformer FILE, ComfyUI's model.diffusion_model. names) equals the folder form bitwise; another model's file
// is refused naming its tensors (Note [Component files]).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "block_source.hpp"
#include "ddo/error.hpp"
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
            if (want.contains(c + "." + run + ".diffusers_gguf")) {
                // diffusers' GGUF integration decodes blocks in float16 (dequantize_gguf_tensor passes no dtype, so
                // d.view(float16).to(None) stays f16) where gguf-py and ddo decode in float32: ddo must be as close
                // to it as gguf-py's own decode run dense is, no closer is possible.
                const auto integration = want.read(c + "." + run + ".diffusers_gguf");
                const double ref_gap = (want.read(c + "." + run + ".latents") - integration).abs().max().item<double>();
                const double our_gap = (latents - integration).abs().max().item<double>();
                EXPECT_LE(our_gap, 2 * ref_gap + 1e-4) << c << " " << run << ": gguf-py dense vs diffusers' GGUF "
                                                       << ref_gap << ", ddo vs diffusers' GGUF " << our_gap;
                std::cout << "[ gguf      ] " << c << " " << run << ": vs diffusers' GGUF integration " << our_gap
                          << " (gguf-py dense vs it: " << ref_gap << ")\n";
            }
        }
    }
}

TEST_F(Qi21QuantParity, EveryRouteStreamsTheStoredBytesAndEqualsResidentBitwise) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    for (const std::string c : {"sdnq_int8", "sdnq_uint4_svd", "fp8_scaled", "gguf_q8_0", "gguf_q4_k"}) {
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
            const std::string format = c == "fp8_scaled"  ? "FP8 E4M3 scaled"
                                       : c == "sdnq_int8" ? "SDNQ int8"
                                       : c == "gguf_q8_0" ? "Q8_0"
                                       : c == "gguf_q4_k" ? "Q4_K"
                                                          : "SDNQ uint4";
            EXPECT_GT(q.at("formats").value(format, 0), 0) << q.dump();
            EXPECT_LT(q.at("stored_bytes").get<uint64_t>(), q.at("dense_bytes").get<uint64_t>()) << q.dump();
            EXPECT_GT(q.at("dequant_count").get<uint64_t>(), 0u) << q.dump();
            // Note [Converted residents]: resident, every group fits decoded, so each quantized tensor is decoded once;
            // streamed, each acquire decodes, on the CPU into reused buffers (Note [Host decode kernels]).
            const auto conv = src->report().at("conversion");
            const auto scratch = src->report().at("scratch");
            uint64_t quantized = 0;
            for (const auto & [f, n] : q.at("formats").items())
                if (f != "F32" && f != "F16" && f != "BF16") quantized += n.get<uint64_t>();
            if (route == ddo::Route::resident) {
                EXPECT_TRUE(conv.at("once").get<bool>()) << conv.dump();
                EXPECT_EQ(q.at("dequant_count").get<uint64_t>(), quantized) << q.dump();
                EXPECT_EQ(scratch.at("reused").get<uint64_t>() + scratch.at("allocated").get<uint64_t>(), 0u) << scratch.dump();
            }
            if (route == ddo::Route::disk) {
                EXPECT_FALSE(conv.at("once").get<bool>()) << conv.dump();
                EXPECT_NE(conv.at("reason").get<std::string>().find("keeps no residents"), std::string::npos) << conv.dump();
                EXPECT_GT(q.at("dequant_count").get<uint64_t>(), quantized) << q.dump();
                if (c.rfind("sdnq", 0) != 0) {
                    EXPECT_GT(scratch.at("reused").get<uint64_t>(), 0u) << scratch.dump();
                }
                EXPECT_EQ(scratch.at("kept_by_caller").get<uint64_t>(), 0u) << scratch.dump();
            }
            std::cout << "[ routes    ] " << c << " " << ddo::to_string(route) << " == resident bitwise; stored "
                      << q.at("stored_bytes") << " of " << q.at("dense_bytes") << " dense bytes, " << q.at("formats").dump()
                      << "\n";
        }
    }
}

// Issue 40 item 3 (Note [One layout per decoded weight]): the sdnq_int8 transformer saved again in sdnq's
// quantized-matmul layout (weights [in, out], scales [1, out]) holds the same values, so its latents equal sdnq_int8's
// bit for bit, resident (TensorFile::read, the strided view reached the matmul: 1/255 in the image) and streamed.
TEST_F(Qi21QuantParity, BothSdnqStorageLayoutsGiveTheSameLatentsBitwise) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    ASSERT_TRUE(reference().contains("layout_twins"));
    for (const auto & [twin, opts] : reference().at("layout_twins").items()) {
        const std::string base = opts.at("twin_of").get<std::string>();
        const auto t = qi::TensorFile::open_component(kDir / twin / "transformer");
        int transposed = 0;  // the layout really differs: some scales are [1, out]
        for (const auto & n : t.names())
            if (n.ends_with(".weight") && t.contains_stored(n.substr(0, n.size() - 7) + ".scale"))
                transposed += t.read_stored(n.substr(0, n.size() - 7) + ".scale").size(0) == 1;
        ASSERT_GT(transposed, 0) << twin << " has no layer in the quantized-matmul layout";
        const auto o = ddo::test::qwen_image_21_run_options(reference().at("runs").at("cfg"));
        std::map<std::string, at::Tensor> latents;
        for (const std::string & c : {base, twin}) {
            const auto m = qi::ModelFiles::open(kDir / c);
            const qi::Transformer transformer{m.transformer_config, qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
            const auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", m.transformer_config.context_in_dim);
            auto resident = qi::make_resident_blocks(m.transformer, m.transformer_config, at::kFloat, at::kCPU);
            latents[c + " resident"] = qi::denoise(m, transformer, *resident, embeds, o);
            auto disk = qi::make_engine_blocks(kDir / c / "transformer", m.transformer_config, at::kFloat,
                                               ddo::test::cpu_plan("transformer", ddo::Route::disk, linear, 0));
            latents[c + " disk"] = qi::denoise(m, transformer, *disk, embeds, o);
            EXPECT_EQ(disk->finish(), 0u);
        }
        for (const std::string route : {" resident", " disk"})
            EXPECT_TRUE(at::equal(latents[base + route], latents[twin + route]))
                << twin << route << " differs from " << base << route << " by "
                << (latents[base + route] - latents[twin + route]).abs().max().item<double>();
        std::cout << "[ layouts   ] " << twin << " (" << transposed << " layers stored [in, out]) == " << base << " bitwise\n";
    }
}

// Note [Component files]: the checkpoint whose transformer/ holds only config.json, with the Q4_K file under ComfyUI's
// names given as the transformer's weights, runs bitwise as the folder form, resident and streamed.
TEST_F(Qi21QuantParity, AGgufFileGivenForTheTransformerEqualsTheFolderFormBitwise) {
    const auto folder = qi::ModelFiles::open(kDir / "gguf_q4_k");
    const ddo::store::ComponentSource file(kDir / "gguf_single" / "transformer", kDir / "gguf_q4_k_comfy.gguf");
    const auto single = qi::ModelFiles::open(kDir / "gguf_single", file);
    ASSERT_TRUE(single.transformer.replaced());
    EXPECT_EQ(single.transformer.names(), folder.transformer.names());
    EXPECT_EQ(single.transformer.quantization().at("formats"), folder.transformer.quantization().at("formats"));
    const auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", folder.transformer_config.context_in_dim);
    const auto o = ddo::test::qwen_image_21_run_options(reference().at("runs").at("cfg"));
    auto denoise_with = [&](const qi::ModelFiles & m, qi::BlockSource & src) {
        const qi::Transformer t{m.transformer_config, qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
        return qi::denoise(m, t, src, embeds, o);
    };
    auto folder_src = qi::make_resident_blocks(folder.transformer, folder.transformer_config, at::kFloat, at::kCPU);
    const auto want = denoise_with(folder, *folder_src);
    auto single_src = qi::make_resident_blocks(single.transformer, single.transformer_config, at::kFloat, at::kCPU);
    EXPECT_TRUE(at::equal(want, denoise_with(single, *single_src))) << "resident";
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    auto streamed = qi::make_engine_blocks(file, single.transformer_config, at::kFloat,
                                           ddo::test::cpu_plan("transformer", ddo::Route::disk, linear, 0));
    EXPECT_TRUE(at::equal(want, denoise_with(single, *streamed))) << "disk route";
    EXPECT_EQ(streamed->finish(), 0u);
    EXPECT_EQ(streamed->report().at("quantization").at("method"), "gguf");
}

TEST_F(Qi21QuantParity, AnotherModelsFileIsRefusedNamingItsTensors) {
    const ddo::store::ComponentSource file(kDir / "gguf_single" / "transformer", kDir / "gguf_foreign.gguf");
    try {
        (void)qi::ModelFiles::open(kDir / "gguf_single", file);
        FAIL() << "a file of other tensors was accepted";
    } catch (const ddo::UsageError & e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("gguf_foreign.gguf"), std::string::npos) << m;
        EXPECT_NE(m.find("are not Qwen-Image 2.1 transformer"), std::string::npos) << m;
        EXPECT_NE(m.find("blocks.0."), std::string::npos) << m;  // the first names, and how many
        EXPECT_NE(m.find(" of its 27 tensors"), std::string::npos) << m;
    }
}

TEST_F(Qi21QuantParity, ATruncatedGgufIsRefusedNamingTheFile) {
    const auto dir = fs::temp_directory_path() / ("ddo_q21q_trunc_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto cut = dir / "cut.gguf";
    fs::copy_file(kDir / "gguf_q4_k_comfy.gguf", cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, fs::file_size(cut) - 100);
    try {
        (void)qi::ModelFiles::open(kDir / "gguf_single", ddo::store::ComponentSource(kDir / "gguf_single" / "transformer", cut));
        ADD_FAILURE() << "a truncated file was accepted";
    } catch (const ddo::RuntimeError & e) {
        EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
}

}  // namespace
