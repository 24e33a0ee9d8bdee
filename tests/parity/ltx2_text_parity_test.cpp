// ddo_ltx2_text (Ltx2PromptEncoder: LTX2Pipeline.encode_prompt on the Gemma-3 tokenizer and text tower) against
// diffusers' own LTX2Pipeline.encode_prompt on the tiny LTX-2.0 checkpoint of tools/reference/ltx2_text_fixtures.py:
// the prompt embeddings and masks of every case (plain, Unicode whitespace stripped, characters strip() keeps, "",
// truncated, a batch, num_videos_per_prompt 2, guidance with the default and with given negative prompts), the
// strip over every code point against Python's str.isspace, and the refusals (LTX-2.5's Gemma 4 text encoder by
// model_type and by model_index.json, a checkpoint without a text encoder, bad settings) naming file and key; a
// control that the other flattening order fails. Tolerance (fp32): 1e-4 absolute on the embeddings; masks and token
// counts equal.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "prompt_encoder.hpp"

namespace fs = std::filesystem;
namespace ltx2 = ddo::ltx2;
using ddo::test::max_abs;
using ddo::test::message_of;

namespace {

const fs::path kDir = LTX2_TEXT_FIXTURE_DIR;
const fs::path kCheckpoint = kDir / "checkpoint_text";
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_text_fixtures"); }

ddo::model::ComponentPlan plan() {
    return ddo::test::cpu_plan("text_encoder", ddo::Route::resident, ddo::test::linear_allocator(LTX2_TEXT_PLUGIN_DIR));
}

std::unique_ptr<ddo::model::ComponentWeights> weights(const ltx2::Ltx2PromptEncoder & e) {
    return ddo::model::ComponentWeights::open(e.text_encoder_dir(), e.groups(), plan(), at::kFloat);
}

std::vector<std::string> strings(const nlohmann::json & j) {
    std::vector<std::string> v;
    for (const auto & s : j) v.push_back(s.get<std::string>());
    return v;
}

// One side of a case against the reference's <case>.<side>_embeds / <side>_attention_mask; the max abs error.
double compare(const ltx2::PromptEmbeddings & got, const ddo::model::TensorFile & f, const std::string & name,
               const std::string & side, const nlohmann::json & counts) {
    const auto want = f.read(name + "." + side + "_embeds"), want_mask = f.read(name + "." + side + "_attention_mask");
    EXPECT_EQ(got.embeds.scalar_type(), at::kFloat) << name;
    EXPECT_EQ(got.mask.scalar_type(), at::kLong) << name;
    EXPECT_TRUE(at::equal(got.mask, want_mask)) << name << " " << side << " mask";
    EXPECT_EQ(got.token_counts, counts.get<std::vector<std::int64_t>>()) << name << " " << side;
    const double e = max_abs(got.embeds, want);
    EXPECT_LE(e, kTol) << name << " " << side;
    return e;
}

class Ltx2TextParity : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json")) GTEST_SKIP() << kDir << "/reference.json missing: build target ltx2_text_fixtures";
        const auto & r = reference();
        std::cout << "[ reference ] diffusers " << r.at("reference_version").get<std::string>() << ", transformers "
                  << r.at("transformers_version").get<std::string>() << " (torch "
                  << r.at("torch_version").get<std::string>() << ", seed " << r.at("seed").get<int>() << ")\n";
    }
};

}  // namespace

TEST_F(Ltx2TextParity, EncodePromptMatchesDiffusers) {
    const auto enc = ltx2::Ltx2PromptEncoder::open(kCheckpoint);
    EXPECT_EQ(enc.features(), reference().at("features").get<std::int64_t>());
    EXPECT_EQ(enc.groups().size(), std::size_t(enc.config().num_layers + 2));
    ASSERT_EQ(enc.tokenizer_files().size(), 3u);
    EXPECT_EQ(enc.tokenizer_files().front(), kCheckpoint / "tokenizer" / "tokenizer.model");
    auto w = weights(enc);
    const auto f = ddo::model::TensorFile::open_file(kDir / "embeds.safetensors");
    int layers_seen = 0;
    ddo::text::Gemma3Callbacks cb;
    cb.on_layer = [&](int, int) { ++layers_seen; };
    for (const auto & c : reference().at("cases")) {
        const std::string name = c.at("name");
        const bool guided = c.at("guided");
        std::optional<std::vector<std::string>> negative;
        if (!c.at("negative_prompts").is_null()) negative = strings(c.at("negative_prompts"));
        layers_seen = 0;
        const auto got = enc.encode_prompt(*w, strings(c.at("prompts")), negative, guided,
                                           c.at("num_videos_per_prompt"), c.at("max_sequence_length"), at::kFloat,
                                           at::kCPU, cb);
        EXPECT_EQ(layers_seen, enc.config().num_layers * (guided ? 2 : 1)) << name;
        double e = compare(got.positive, f, name, "prompt", c.at("token_counts"));
        ASSERT_EQ(got.negative.has_value(), guided) << name;
        if (guided) e = std::max(e, compare(*got.negative, f, name, "negative_prompt", c.at("negative_token_counts")));
        std::cout << "[ parity    ] " << name << " [" << got.positive.embeds.size(0) << ", "
                  << got.positive.embeds.size(1) << ", " << got.positive.embeds.size(2) << "]"
                  << (guided ? " + negative" : "") << ", tokens " << c.at("token_counts").dump()
                  << ": max abs error " << e << " (tolerance " << kTol << "), masks equal\n";
    }
    // Control: the other flattening order (state-major, s * hidden + h) is far from the reference.
    const auto plain = enc.encode(*w, {"a robot dancing in the rain"}, 16, at::kFloat, at::kCPU).embeds;
    const auto F = enc.config().num_layers + 1, H = enc.config().hidden_size;
    const double e_order = max_abs(plain.view({1, 16, H, F}).transpose(2, 3).reshape({1, 16, H * F}),
                                   f.read("plain.prompt_embeds"));
    EXPECT_GT(e_order, 100 * kTol);
    std::cout << "[ controls  ] plain flattened state-major: max abs error " << e_order << "\n";
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Ltx2TextParity, StripRemovesExactlyPythonsWhitespace) {
    std::set<char32_t> space;
    for (const auto & c : reference().at("python_whitespace")) space.insert(c.get<char32_t>());
    ASSERT_EQ(space.size(), 29u);
    const auto utf8 = [](char32_t c) {
        std::string s;
        if (c < 0x80) {
            s += char(c);
        } else if (c < 0x800) {
            s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
        } else {
            s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F));
            s += char(0x80 | (c & 0x3F));
        }
        return s;
    };
    std::size_t wrong = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        const std::string ch = utf8(c), text = ch + ch + "a b" + ch;
        if (ltx2::strip_prompt(text) != (space.count(c) ? "a b" : text)) ++wrong;
    }
    EXPECT_EQ(wrong, 0u);
    // Bytes that are not UTF-8 end the strip there (the tokenizer then refuses them, naming the offset).
    EXPECT_EQ(ltx2::strip_prompt(" \xff a \x80 "), "\xff a \x80");
    EXPECT_EQ(ltx2::strip_prompt("\xe3\x80"), "\xe3\x80");  // a truncated U+3000
    std::cout << "[ parity    ] strip over every code point == Python str.strip (" << space.size()
              << " whitespace code points)\n";
}

TEST_F(Ltx2TextParity, UnimplementedTextEncodersAreRefusedNamingFileAndKey) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"refuse_gemma4", (kDir / "refuse_gemma4" / "text_encoder" / "config.json").string() + ": model_type is \"gemma4_unified\""},
        {"refuse_gemma4_index",
         (kDir / "refuse_gemma4_index" / "model_index.json").string() + ": text_encoder is \"Gemma4UnifiedForConditionalGeneration\""},
        {"refuse_no_text_encoder", (kDir / "refuse_no_text_encoder" / "model_index.json").string() + ": text_encoder is null"},
    };
    for (const auto & [dir, want] : cases) {
        const auto m = message_of<ddo::UsageError>([&] { (void)ltx2::Ltx2PromptEncoder::open(kDir / dir); });
        EXPECT_NE(m.find(want), std::string::npos) << dir << ": " << m;
        std::cout << "[ errors    ] " << dir << ": " << m << "\n";
    }
    EXPECT_NE(message_of<ddo::UsageError>([] { (void)ltx2::Ltx2PromptEncoder::open(kDir / "refuse_gemma4"); }).find("LTX-2.5"),
              std::string::npos);
}

TEST_F(Ltx2TextParity, BadSettingsAreRefused) {
    const auto enc = ltx2::Ltx2PromptEncoder::open(kCheckpoint);
    auto w = weights(enc);
    const auto run = [&](std::vector<std::string> p, std::optional<std::vector<std::string>> n, std::int64_t videos,
                         std::int64_t len) {
        return message_of<ddo::UsageError>(
            [&] { (void)enc.encode_prompt(*w, p, n, true, videos, len, at::kFloat, at::kCPU); });
    };
    EXPECT_NE(run({}, std::nullopt, 1, 16).find("no prompt"), std::string::npos);
    EXPECT_NE(run({"a"}, std::nullopt, 1, 0).find("max_sequence_length"), std::string::npos);
    EXPECT_NE(run({"a"}, std::nullopt, 0, 16).find("num_videos_per_prompt"), std::string::npos);
    EXPECT_NE(run({"a", "b", "c"}, std::vector<std::string>{"x", "y"}, 1, 16).find("2 negative prompts for 3"),
              std::string::npos);
    EXPECT_EQ(w->finish(), 0u);
}
