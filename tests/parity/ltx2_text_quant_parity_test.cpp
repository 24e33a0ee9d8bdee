// LTX-2's prompt encoder (Ltx2PromptEncoder on the Gemma-3 text tower) on quantized text encoders (issue 26) against
// diffusers' LTX2Pipeline.encode_prompt (tools/reference/text_quant_fixtures.py): SDNQ int8 (saved by sdnq's
// save_sdnq_model; the reference is transformers' own SDNQ integration, from_pretrained of the folder), scaled fp8
// (Lightricks' weight_scale layout; the reference runs the weights as ltx_core folds them) and GGUF Q8_0 (written by
// gguf-py, the embedding table included; the reference runs gguf-py's decode dense), each on one prompt, a
// truncated one, a left-padded batch and a guided pair. The embeddings stack every hidden state, so each layer and
// the final norm are compared. Tolerance (fp32): 1e-4 absolute on the embeddings, masks and token counts equal, as
// the dense text test's. The report's quantization names each format; the disk route equals resident bitwise; the
// GGUF file given as the text encoder's file (Ltx2PromptEncoder::open(dir, file), Note [Component files]) equals
// the folder form bitwise. A control shows the quantization error is far above the tolerance.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "prompt_encoder.hpp"

namespace fs = std::filesystem;
namespace ltx2 = ddo::ltx2;
using ddo::test::max_abs;

namespace {

const fs::path kDir = TEXT_QUANT_FIXTURE_DIR;
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "text_quant_fixtures"); }

ddo::model::ComponentPlan plan(ddo::Route route) {
    return ddo::test::cpu_plan("text_encoder", route, ddo::test::linear_allocator(LTX2_TEXT_PLUGIN_DIR));
}

std::unique_ptr<ddo::model::ComponentWeights> open_weights(const ltx2::Ltx2PromptEncoder & e, ddo::Route route) {
    return ddo::model::ComponentWeights::open(e.text_encoder(), e.groups(), plan(route), at::kFloat);
}

std::vector<std::string> strings(const nlohmann::json & j) {
    std::vector<std::string> v;
    for (const auto & s : j) v.push_back(s.get<std::string>());
    return v;
}

// The Gemma-3 cases of reference.json ("gemma3_sdnq_int8", ...) and the report label of the format each stores.
std::vector<std::pair<std::string, std::string>> cases() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto & [name, c] : reference().at("cases").items()) {
        if (c.at("encoder") != "gemma3") continue;
        out.emplace_back(name, name == "gemma3_fp8_scaled" ? "FP8 E4M3 scaled"
                               : name == "gemma3_gguf_q8_0" ? "Q8_0"
                                                            : "SDNQ int8");
    }
    return out;
}

// reference.json's gemma3_cases entry `name` (ltx2_text_fixtures' case of that name).
const nlohmann::json & gemma_case(const std::string & name) {
    for (const auto & k : reference().at("gemma3_cases"))
        if (k.at("name") == name) return k;
    throw std::runtime_error("reference.json: no gemma3_cases entry " + name);
}

ltx2::EncodedPrompts encode_case(const ltx2::Ltx2PromptEncoder & enc, ddo::model::ComponentWeights & w,
                                 const nlohmann::json & c) {
    std::optional<std::vector<std::string>> negative;
    if (!c.at("negative_prompts").is_null()) negative = strings(c.at("negative_prompts"));
    return enc.encode_prompt(w, strings(c.at("prompts")), negative, c.at("guided"), c.at("num_videos_per_prompt"),
                             c.at("max_sequence_length"), at::kFloat, at::kCPU);
}

// One side of a case against <name>.<side>_embeds / <side>_attention_mask; the max abs error.
double compare(const ltx2::PromptEmbeddings & got, const ddo::model::TensorFile & f, const std::string & what,
               const std::string & key) {
    EXPECT_TRUE(at::equal(got.mask, f.read(key + "_attention_mask"))) << what << " mask";
    const double e = max_abs(got.embeds, f.read(key + "_embeds"), what);
    EXPECT_LE(e, kTol) << what;
    return e;
}

class Ltx2TextQuantParity : public ddo::test::ParitySuite {
protected:
    Ltx2TextQuantParity() : ParitySuite(kDir, "text_quant_fixtures") {}
};

TEST_F(Ltx2TextQuantParity, QuantizedTextEncodersEqualDiffusersEncodePrompt) {
    const auto all = cases();
    ASSERT_EQ(all.size(), 3u) << "sdnq_int8, fp8_scaled, gguf_q8_0";
    for (const auto & [c, format] : all) {
        const auto enc = ltx2::Ltx2PromptEncoder::open(kDir / c / "checkpoint");
        const auto f = ddo::model::TensorFile::open_file(kDir / c / "embeds.safetensors");
        auto w = open_weights(enc, ddo::Route::resident);
        for (const auto & k : reference().at("gemma3_cases")) {
            const std::string name = k.at("name");
            const auto got = encode_case(enc, *w, k);
            double e = compare(got.positive, f, c + " " + name, name + ".prompt");
            ASSERT_EQ(got.negative.has_value(), k.at("guided").get<bool>()) << c << " " << name;
            if (got.negative)
                e = std::max(e, compare(*got.negative, f, c + " " + name + " negative", name + ".negative_prompt"));
            std::cout << "[ parity    ] " << c << " " << name << " [" << got.positive.embeds.size(0) << ", "
                      << got.positive.embeds.size(1) << ", " << got.positive.embeds.size(2) << "]"
                      << (got.negative ? " + negative" : "") << ": max abs error " << e << " (tolerance " << kTol
                      << "), masks equal\n";
        }
        EXPECT_EQ(w->finish(), 0u);
        const auto q = w->report().at("quantization");
        EXPECT_GT(q.at("formats").value(format, 0), 0) << c << ": " << q.dump();
        EXPECT_LT(q.at("stored_bytes").get<uint64_t>(), q.at("dense_bytes").get<uint64_t>()) << c << ": " << q.dump();
        std::cout << "[ report    ] " << c << ": stored " << q.at("stored_bytes") << " of " << q.at("dense_bytes")
                  << " dense bytes, " << q.at("formats").dump() << "\n";
    }
}

// The quantization error of the reference itself (its embeddings against the dense tower's) is far above the
// tolerance: an encoder that read the dense weights, or decoded them another way, would fail the test above.
TEST_F(Ltx2TextQuantParity, ControlTheQuantizationErrorIsFarAboveTheTolerance) {
    for (const auto & [c, format] : cases()) {
        const auto ctl = ddo::model::TensorFile::open_file(kDir / c / "control.safetensors");
        const auto ref = ddo::model::TensorFile::open_file(kDir / c / "embeds.safetensors");
        const double gap = max_abs(ref.read("plain.prompt_embeds"), ctl.read("dense.plain.prompt_embeds"), c);
        EXPECT_GT(gap, 10 * kTol) << c << ": the quantized reference is as close to the dense tower as the tolerance";
        std::cout << "[ control   ] " << c << ": quantized vs dense reference " << gap << "\n";
    }
}

TEST_F(Ltx2TextQuantParity, TheDiskRouteEqualsResidentBitwise) {
    const auto & k = gemma_case("plain");
    for (const auto & [c, format] : cases()) {
        const auto enc = ltx2::Ltx2PromptEncoder::open(kDir / c / "checkpoint");
        auto resident = open_weights(enc, ddo::Route::resident);
        const auto want = encode_case(enc, *resident, k).positive.embeds;
        EXPECT_EQ(resident->finish(), 0u);
        auto disk = open_weights(enc, ddo::Route::disk);
        const auto got = encode_case(enc, *disk, k).positive.embeds;
        EXPECT_EQ(disk->finish(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << c << ": disk differs from resident";
        EXPECT_GT(disk->bytes_streamed(), 0u) << c;
        const auto q = disk->report().at("quantization");
        EXPECT_GT(q.at("formats").value(format, 0), 0) << c << ": " << q.dump();
        EXPECT_GT(q.at("dequant_count").get<uint64_t>(), 0u) << c << ": " << q.dump();
        std::cout << "[ routes    ] " << c << " disk == resident bitwise; bytes moved " << disk->bytes_streamed()
                  << "\n";
    }
}

// Note [Component files]: the checkpoint whose text_encoder/ holds only config.json, with the GGUF file given as the
// text encoder's weights, encodes bitwise as the folder form, resident and on the disk route.
TEST_F(Ltx2TextQuantParity, AGgufFileGivenAsTheTextEncoderEqualsTheFolderFormBitwise) {
    const fs::path file = kDir / "gemma3_gguf_q8_0" / "checkpoint" / "text_encoder" / "model.gguf";
    const auto folder = ltx2::Ltx2PromptEncoder::open(kDir / "gemma3_gguf_q8_0" / "checkpoint");
    const auto single = ltx2::Ltx2PromptEncoder::open(kDir / "gemma3_gguf_single" / "checkpoint", file);
    ASSERT_EQ(single.text_encoder().file, file);
    const auto & k = gemma_case("batch");  // left padded
    auto fw = open_weights(folder, ddo::Route::resident);
    const auto want = encode_case(folder, *fw, k).positive.embeds;
    EXPECT_EQ(fw->finish(), 0u);
    for (const auto route : {ddo::Route::resident, ddo::Route::disk}) {
        auto w = open_weights(single, route);
        const auto got = encode_case(single, *w, k).positive.embeds;
        EXPECT_EQ(w->finish(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << ddo::to_string(route) << ": the file form differs from the folder form";
        EXPECT_EQ(w->report().at("quantization").at("method"), "gguf");
    }
}

}  // namespace
