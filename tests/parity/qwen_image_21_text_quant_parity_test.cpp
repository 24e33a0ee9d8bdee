// qwen_image_21's Qwen3-VL text tower on quantized text encoders (issue 26) against transformers
// (tools/reference/text_quant_fixtures.py): SDNQ int8 and SDNQ uint4 with the token embedding table quantized
// (saved by sdnq's save_sdnq_model; the reference is transformers' own SDNQ integration, from_pretrained of the
// folder), scaled fp8 (Lightricks' weight_scale layout; the reference runs the weights as ltx_core folds them) and
// GGUF Q8_0 (written by gguf-py, the embedding table included; the reference runs gguf-py's decode dense). Per
// prompt: the template tokens, the last layer before the final norm and the prompt embeddings after the template
// drop; two prompts left padded in one batch. Tolerance (fp32): 1e-4 absolute, as the dense text ladder's (the
// decoded weights are the references' bit for bit, tests/parity/quant_dequant_parity_test.cpp). The report's
// quantization names each format; the disk route equals resident bitwise; the GGUF file given as the text
// encoder's file (PromptEncoder::open(dir, file), Note [Component files]) equals the folder form bitwise. A control
// shows the quantization error is far above the tolerance, so reading the weights any other way would fail.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "cpu_plan.hpp"
#include "parity/parity_support.hpp"
#include "prompt_encoder.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;
using ddo::test::max_abs;

namespace {

const fs::path kDir = TEXT_QUANT_FIXTURE_DIR;
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "text_quant_fixtures"); }

ddo::model::ComponentPlan plan(ddo::Route route) {
    return ddo::test::cpu_plan("text_encoder", route, ddo::test::linear_allocator(QI21_PLUGIN_DIR));
}

std::vector<int64_t> to_vec(const at::Tensor & t) {
    auto c = t.to(at::kLong).contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// The Qwen cases of reference.json ("qwen_sdnq_int8", ...) and the report label of the format each stores.
std::vector<std::pair<std::string, std::string>> cases() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto & [name, c] : reference().at("cases").items()) {
        if (c.at("encoder") != "qwen3_vl") continue;
        const std::string format = name == "qwen_fp8_scaled"             ? "FP8 E4M3 scaled"
                                   : name == "qwen_gguf_q8_0"            ? "Q8_0"
                                   : name == "qwen_sdnq_uint4_embedding" ? "SDNQ uint4"
                                                                         : "SDNQ int8";
        out.emplace_back(name, format);
    }
    return out;
}

std::unique_ptr<ddo::model::ComponentWeights> open_weights(qi::PromptEncoder & enc, ddo::Route route) {
    return ddo::model::ComponentWeights::open(enc.weights(), enc.groups(), plan(route), at::kFloat);
}

class Qi21TextQuantParity : public ddo::test::ParitySuite {
protected:
    Qi21TextQuantParity() : ParitySuite(kDir, "text_quant_fixtures") {}
};

TEST_F(Qi21TextQuantParity, QuantizedTowersEqualTransformersOnTheirDecodedWeights) {
    const auto all = cases();
    ASSERT_EQ(all.size(), 4u) << "sdnq_int8, sdnq_uint4_embedding, fp8_scaled, gguf_q8_0";
    for (const auto & [c, format] : all) {
        auto enc = qi::PromptEncoder::open(kDir / c / "checkpoint");
        EXPECT_EQ(enc.drop_index(), reference().at("qwen").at("drop_idx").get<int64_t>()) << c;
        const auto f = qi::TensorFile::open_file(kDir / c / "text_encoder.safetensors");
        auto w = open_weights(enc, ddo::Route::resident);
        for (const auto & [name, prompt] : reference().at("qwen").at("prompts").items()) {
            const auto ids = f.read(name + ".ids");
            EXPECT_EQ(enc.template_ids(prompt.get<std::string>()), to_vec(ids[0])) << c << " " << name;
            const auto last = ddo::text::qwen3_last_hidden_before_norm(*w, enc.config(), ids, at::ones_like(ids),
                                                                       at::kFloat, at::kCPU);
            const auto e = enc.encode(*w, {prompt.get<std::string>()}, at::kFloat, at::kCPU);
            const double d_last = max_abs(last, f.read(name + ".last"), c + " " + name);
            const double d_embeds = max_abs(e.embeds, f.read(name + ".embeds"), c + " " + name);
            EXPECT_LE(d_last, kTol) << c << " " << name << ": last layer before the final norm";
            EXPECT_LE(d_embeds, kTol) << c << " " << name << ": prompt embeddings after the template drop";
            std::cout << "[ text      ] " << c << " " << name << ": " << ids.size(1) << " tokens; max |diff| last "
                      << d_last << ", embeds " << d_embeds << "\n";
        }
        std::vector<std::string> batch;
        for (const auto & k : reference().at("qwen").at("batch_prompts"))
            batch.push_back(reference().at("qwen").at("prompts").at(k.get<std::string>()));
        const auto e = enc.encode(*w, batch, at::kFloat, at::kCPU);
        ASSERT_TRUE(e.mask.has_value()) << c;
        EXPECT_TRUE(at::equal(*e.mask, f.read("batch.mask").to(at::kBool))) << c;
        const double d_batch = max_abs(e.embeds, f.read("batch.embeds"), c + " batch");
        EXPECT_LE(d_batch, kTol) << c << ": two prompts left padded";
        EXPECT_EQ(w->finish(), 0u);
        const auto q = w->report().at("quantization");
        EXPECT_GT(q.at("formats").value(format, 0), 0) << c << ": " << q.dump();
        EXPECT_LT(q.at("stored_bytes").get<uint64_t>(), q.at("dense_bytes").get<uint64_t>()) << c << ": " << q.dump();
        if (c == "qwen_sdnq_uint4_embedding" || c == "qwen_gguf_q8_0") {
            // The embedding table (group 0) is stored quantized and decoded whole when its group is acquired.
            const auto whole = qi::TensorFile::open_component(enc.weights());
            const auto table = enc.config().weight_prefix + "embed_tokens.weight";
            ASSERT_TRUE(whole.contains_stored(table)) << c << ": " << table;
            EXPECT_FALSE(whole.read_stored(table).is_floating_point()) << c << ": " << table << " stored dense";
        }
        std::cout << "[ batch     ] " << c << ": max |diff| " << d_batch << "; stored " << q.at("stored_bytes")
                  << " of " << q.at("dense_bytes") << " dense bytes, " << q.at("formats").dump() << "\n";
    }
}

// The quantization error of the reference itself (its embeddings against the dense tower's) is far above the
// tolerance: a tower that read the dense weights, or decoded them another way, would fail the test above.
TEST_F(Qi21TextQuantParity, ControlTheQuantizationErrorIsFarAboveTheTolerance) {
    for (const auto & [c, format] : cases()) {
        const auto f = qi::TensorFile::open_file(kDir / c / "control.safetensors");
        const auto ref = qi::TensorFile::open_file(kDir / c / "text_encoder.safetensors");
        const double gap = max_abs(ref.read("long.embeds"), f.read("dense.long.embeds"), c);
        EXPECT_GT(gap, 10 * kTol) << c << ": the quantized reference is as close to the dense tower as the tolerance";
        std::cout << "[ control   ] " << c << ": quantized vs dense reference " << gap << "\n";
    }
}

TEST_F(Qi21TextQuantParity, TheDiskRouteEqualsResidentBitwise) {
    const std::string prompt = reference().at("qwen").at("prompts").at("long");
    for (const auto & [c, format] : cases()) {
        auto enc = qi::PromptEncoder::open(kDir / c / "checkpoint");
        auto resident = open_weights(enc, ddo::Route::resident);
        const auto want = enc.encode(*resident, {prompt}, at::kFloat, at::kCPU).embeds;
        EXPECT_EQ(resident->finish(), 0u);
        auto disk = open_weights(enc, ddo::Route::disk);
        const auto got = enc.encode(*disk, {prompt}, at::kFloat, at::kCPU).embeds;
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
TEST_F(Qi21TextQuantParity, AGgufFileGivenAsTheTextEncoderEqualsTheFolderFormBitwise) {
    const fs::path file = kDir / "qwen_gguf_q8_0" / "checkpoint" / "text_encoder" / "model.gguf";
    auto folder = qi::PromptEncoder::open(kDir / "qwen_gguf_q8_0" / "checkpoint");
    auto single = qi::PromptEncoder::open(kDir / "qwen_gguf_single" / "checkpoint", file);
    ASSERT_EQ(single.weights().file, file);
    std::vector<std::string> prompts;
    for (const auto & k : reference().at("qwen").at("batch_prompts"))
        prompts.push_back(reference().at("qwen").at("prompts").at(k.get<std::string>()));
    auto fw = open_weights(folder, ddo::Route::resident);
    const auto want = folder.encode(*fw, prompts, at::kFloat, at::kCPU).embeds;
    EXPECT_EQ(fw->finish(), 0u);
    for (const auto route : {ddo::Route::resident, ddo::Route::disk}) {
        auto w = open_weights(single, route);
        const auto got = single.encode(*w, prompts, at::kFloat, at::kCPU).embeds;
        EXPECT_EQ(w->finish(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << ddo::to_string(route) << ": the file form differs from the folder form";
        EXPECT_EQ(w->report().at("quantization").at("method"), "gguf");
    }
}

}  // namespace
