// ddo_sentencepiece (the Gemma tokenizer over tokenizer.model) against the tokenizer LTX2Pipeline loads
// (transformers' AutoTokenizer -> GemmaTokenizer over tokenizer.json), fixtures of tools/reference/gemma3_fixtures.py:
// ids equal on every corpus string (exact: no tolerance), the pipeline's left-padded, truncated batches equal,
// the same ids without tokenizer.json (added tokens from the model), and refusals naming the file and the key.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "sentencepiece_tokenizer.hpp"

namespace fs = std::filesystem;
using ddo::text::SentencePieceTokenizer;

namespace {

const fs::path kDir = GEMMA3_FIXTURE_DIR;
const fs::path kTokenizer = kDir / "checkpoint" / "tokenizer";

nlohmann::json load(const fs::path & f) { return nlohmann::json::parse(std::ifstream(f)); }

class SentencePieceParity : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json")) GTEST_SKIP() << kDir << "/reference.json missing: build target gemma3_fixtures";
        const auto r = load(kDir / "reference.json");
        std::cout << "[ reference ] transformers " << r.at("reference_version").get<std::string>() << " (torch "
                  << r.at("torch_version").get<std::string>() << ", sentencepiece "
                  << r.at("sentencepiece_version").get<std::string>() << ", seed " << r.at("seed").get<int>() << ")\n";
    }
};

// A scratch copy of the tokenizer folder, removed at the end of the test.
struct Scratch {
    fs::path dir = fs::temp_directory_path() / ("ddo_spm_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Scratch() {
        fs::remove_all(dir);
        fs::create_directories(dir);
        for (const auto & e : fs::directory_iterator(kTokenizer)) fs::copy_file(e.path(), dir / e.path().filename());
    }
    ~Scratch() { fs::remove_all(dir); }
};

template <class F>
std::string usage_error_of(F && f) {
    try {
        f();
    } catch (const ddo::UsageError & e) {
        return e.what();
    }
    return "(no UsageError)";
}

void expect_corpus_equal(const SentencePieceTokenizer & tok, const std::string & label) {
    const auto corpus = load(kDir / "tokenizer_cases.json");
    std::size_t n = 0, equal = 0;
    for (const auto & c : corpus.at("cases")) {
        const auto text = c.at("text").get<std::string>();
        const auto want = c.at("ids").get<std::vector<std::int64_t>>();
        const auto got = tok.encode(text);
        ++n;
        if (got == want) ++equal;
        EXPECT_EQ(got, want) << label << ": " << nlohmann::json(text).dump();
    }
    std::cout << "[ parity    ] " << label << ": " << equal << " / " << n << " strings give transformers' "
              << corpus.at("tokenizer_class").get<std::string>() << " ids exactly\n";
    EXPECT_GE(n, 200u);
}

}  // namespace

TEST_F(SentencePieceParity, EveryCorpusStringGivesThePipelinesIds) {
    const auto tok = SentencePieceTokenizer::from_dir(kTokenizer);
    EXPECT_EQ(tok.bos_id(), 2);
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.token_id("<start_of_turn>"), std::optional<std::int64_t>(6));
    expect_corpus_equal(tok, "tokenizer.model + tokenizer.json");
}

TEST_F(SentencePieceParity, WithoutTokenizerJsonTheModelsAddedTokensGiveTheSameIds) {
    Scratch s;
    fs::remove(s.dir / "tokenizer.json");
    expect_corpus_equal(SentencePieceTokenizer::from_dir(s.dir), "tokenizer.model alone");
}

TEST_F(SentencePieceParity, LeftPaddedTruncatedBatchesAreThePipelines) {
    const auto tok = SentencePieceTokenizer::from_dir(kTokenizer);
    const auto cases = load(kDir / "padded_cases.json");
    ASSERT_FALSE(cases.at("cases").empty());
    for (const auto & c : cases.at("cases")) {
        const auto texts = c.at("texts").get<std::vector<std::string>>();
        const auto max_length = c.at("max_length").get<std::int64_t>();
        const auto p = tok.encode_left_padded(texts, max_length);
        std::vector<std::int64_t> want_ids, want_mask;
        for (const auto & row : c.at("ids")) for (auto v : row) want_ids.push_back(v.get<std::int64_t>());
        for (const auto & row : c.at("mask")) for (auto v : row) want_mask.push_back(v.get<std::int64_t>());
        EXPECT_EQ(p.batch, std::int64_t(texts.size()));
        EXPECT_EQ(p.length, max_length);
        EXPECT_EQ(p.ids, want_ids) << c.at("prompts").dump();
        EXPECT_EQ(p.mask, want_mask) << c.at("prompts").dump();
        std::cout << "[ padded    ] " << c.at("prompts").dump() << " max_length " << max_length
                  << ": ids and mask equal\n";
    }
    EXPECT_NE(usage_error_of([&] { (void)tok.encode_left_padded({"x"}, 0); }).find("max_length"), std::string::npos);
}

TEST_F(SentencePieceParity, InvalidUtf8IsRefusedWithTheOffset) {
    const auto tok = SentencePieceTokenizer::from_dir(kTokenizer);
    const auto m = usage_error_of([&] { (void)tok.encode("ab\xff"); });
    EXPECT_NE(m.find("byte 2"), std::string::npos) << m;
}

TEST_F(SentencePieceParity, UnimplementedSettingsAreRefusedNamingFileAndKey) {
    {
        Scratch s;  // an added token with lstrip
        auto tj = load(s.dir / "tokenizer.json");
        tj["added_tokens"][6]["lstrip"] = true;
        std::ofstream(s.dir / "tokenizer.json") << tj.dump();
        const auto m = usage_error_of([&] { (void)SentencePieceTokenizer::from_dir(s.dir); });
        EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
        EXPECT_NE(m.find("added_tokens[6].lstrip"), std::string::npos) << m;
    }
    {
        Scratch s;  // a vocabulary that is not the model's
        auto tj = load(s.dir / "tokenizer.json");
        tj["model"]["vocab"]["in"] = 271;
        std::ofstream(s.dir / "tokenizer.json") << tj.dump();
        const auto m = usage_error_of([&] { (void)SentencePieceTokenizer::from_dir(s.dir); });
        EXPECT_NE(m.find("model.vocab[\"in\"]"), std::string::npos) << m;
    }
    {
        Scratch s;  // left truncation
        auto cfg = load(s.dir / "tokenizer_config.json");
        cfg["truncation_side"] = "left";
        std::ofstream(s.dir / "tokenizer_config.json") << cfg.dump();
        const auto m = usage_error_of([&] { (void)SentencePieceTokenizer::from_dir(s.dir); });
        EXPECT_NE(m.find("tokenizer_config.json: truncation_side"), std::string::npos) << m;
    }
    {
        Scratch s;  // a model with a dummy prefix: flip normalizer_spec.add_dummy_prefix (field 3 of field 3) to 1
        std::ifstream in(s.dir / "tokenizer.model", std::ios::binary);
        std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        in.close();
        const std::string identity = std::string("\x0a\x08identity", 10);
        const auto at = b.find(identity);
        ASSERT_NE(at, std::string::npos);
        // normalizer_spec: name, precompiled_charsmap (empty), then add_dummy_prefix = 0 (key 0x18, value 0x00)
        const auto flag = b.find(std::string("\x18\x00", 2), at + identity.size());
        ASSERT_NE(flag, std::string::npos);
        b[flag + 1] = '\x01';
        std::ofstream(s.dir / "tokenizer.model", std::ios::binary) << b;
        const auto m = usage_error_of([&] { (void)SentencePieceTokenizer::from_dir(s.dir); });
        EXPECT_NE(m.find("tokenizer.model: normalizer_spec.add_dummy_prefix"), std::string::npos) << m;
    }
    {
        Scratch s;  // no model at all
        fs::remove(s.dir / "tokenizer.model");
        const auto m = usage_error_of([&] { (void)SentencePieceTokenizer::from_dir(s.dir); });
        EXPECT_NE(m.find("tokenizer.model"), std::string::npos) << m;
    }
}
