// ddo::text::BpeTokenizer against the Python `tokenizers` library (tools/reference/tokenizer_fixtures.py): every
// corpus string of every fixture tokenizer must give exactly the reference ids. Plus unit cases on small
// tokenizer.json files written here: refusals (unsupported model/normalizer/regex, missing file, invalid UTF-8)
// name the file and the key; token_id finds added tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bpe_tokenizer.hpp"
#include "ddo/error.hpp"

namespace fs = std::filesystem;
using ddo::text::BpeTokenizer;
using Json = nlohmann::json;

namespace {

const fs::path kDir = BPE_FIXTURE_DIR;

Json read_json(const fs::path & p) {
    std::ifstream in(p);
    if (!in) throw std::runtime_error(p.string() + ": cannot open");
    return Json::parse(in);
}

// nullptr when the fixtures were not generated (the caller skips).
const Json * reference() {
    static const Json j = [] { return fs::exists(kDir / "reference.json") ? read_json(kDir / "reference.json") : Json(); }();
    return j.is_null() ? nullptr : &j;
}

#define REQUIRE_FIXTURES()                                                                                          \
    if (!reference())                                                                                               \
    GTEST_SKIP() << (kDir / "reference.json").string()                                                             \
                 << " missing: build target bpe_tokenizer_fixtures (tools/reference/tokenizer_fixtures.py)"

std::string escaped(const std::string & s) {
    std::ostringstream o;
    o << '"';
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            o << s[i++];
            continue;
        }
        std::size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        unsigned cp = len == 1 ? c : c & (0x7F >> len);
        for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
        char buf[16];
        std::snprintf(buf, sizeof buf, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", cp);
        o << buf;
        i += len;
    }
    o << '"';
    return o.str();
}

std::string ids_text(const std::vector<std::int64_t> & ids) {
    std::ostringstream o;
    o << '[';
    for (std::size_t i = 0; i < ids.size(); ++i) o << (i ? ", " : "") << ids[i];
    o << ']';
    return o.str();
}

// Every case of one fixture; returns the number of cases checked.
std::size_t check_fixture(const std::string & tokenizer_file, const std::string & corpus_file) {
    const BpeTokenizer tok = BpeTokenizer::from_file(kDir / tokenizer_file);
    const Json corpus = read_json(kDir / corpus_file);
    std::cout << "[ reference ] " << tokenizer_file << ": " << corpus.at("reference").get<std::string>() << " "
              << corpus.at("reference_version").get<std::string>() << ", " << corpus.at("cases").size() << " strings\n";
    EXPECT_EQ(tok.vocab_size(), corpus.at("vocab_size").get<std::size_t>()) << tokenizer_file;
    int failures = 0;
    for (const Json & c : corpus.at("cases")) {
        const std::string text = c.at("text").get<std::string>();
        const auto want = c.at("ids").get<std::vector<std::int64_t>>();
        const auto got = tok.encode(text);
        if (got != want && ++failures <= 25)
            ADD_FAILURE() << tokenizer_file << ": text " << escaped(text) << "\n  expected " << ids_text(want)
                          << "\n  actual   " << ids_text(got);
    }
    EXPECT_EQ(failures, 0) << tokenizer_file << ": " << failures << " of " << corpus.at("cases").size()
                           << " strings differ";
    return corpus.at("cases").size();
}

TEST(BpeTokenizerParity, TrainedQwen2LayoutCorpus) {
    REQUIRE_FIXTURES();
    EXPECT_GE(check_fixture("tokenizer.json", "corpus.json"), 200u);
}

TEST(BpeTokenizerParity, VariantLegacyMergesIgnoreMergesAddedTokenOptions) {
    REQUIRE_FIXTURES();
    EXPECT_GE(check_fixture("tokenizer_variant.json", "corpus_variant.json"), 200u);
}

TEST(BpeTokenizerParity, OtherCodePaths) {  // Split behaviours, invert, GPT-2 ByteLevel, NFKC/NFKD, templates
    REQUIRE_FIXTURES();
    std::size_t n = 0;
    for (const Json & f : reference()->at("fixtures")) {
        const std::string tok = f.at("tokenizer").get<std::string>();
        if (tok == "tokenizer.json" || tok == "tokenizer_variant.json") continue;
        SCOPED_TRACE(tok);
        check_fixture(tok, f.at("corpus").get<std::string>());
        ++n;
    }
    EXPECT_GE(n, 1u);
}

TEST(BpeTokenizerParity, TokenIdOfAddedTokens) {
    REQUIRE_FIXTURES();
    const BpeTokenizer tok = BpeTokenizer::from_file(kDir / "tokenizer.json");
    const Json file = read_json(kDir / "tokenizer.json");
    for (const Json & a : file.at("added_tokens"))
        EXPECT_EQ(tok.token_id(a.at("content").get<std::string>()), a.at("id").get<std::int64_t>());
    EXPECT_EQ(tok.encode("<|im_start|>"), std::vector<std::int64_t>{*tok.token_id("<|im_start|>")});
}

// ---------------------------------------------------------------- unit cases on small files written here
Json small_tokenizer() {
    return Json::parse(R"({
      "version": "1.0", "truncation": null, "padding": null,
      "added_tokens": [{"id": 3, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false, "special": true}],
      "normalizer": {"type": "NFC"},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
      "post_processor": null, "decoder": null,
      "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}})");
}

class BpeTokenizerUnit : public ::testing::Test {
protected:
    fs::path write(const std::string & name, const Json & j) {
        const fs::path p = dir_ / name;
        std::ofstream(p) << j.dump();
        return p;
    }
    // The UsageError message from loading `j`; fails the test when it loads.
    std::string refusal(const std::string & name, const Json & j) {
        const fs::path p = write(name, j);
        try {
            BpeTokenizer::from_file(p);
        } catch (const ddo::UsageError & e) {
            std::cout << "[ refused   ] " << e.what() << "\n";
            EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
            return e.what();
        }
        ADD_FAILURE() << name << " loaded, expected a ddo::UsageError";
        return {};
    }
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("ddo_bpe_unit_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_F(BpeTokenizerUnit, SmallTokenizerEncodesAndFindsAddedToken) {
    const BpeTokenizer tok = BpeTokenizer::from_file(write("tokenizer.json", small_tokenizer()));
    EXPECT_EQ(tok.token_id("<|im_start|>"), 3);
    EXPECT_EQ(tok.token_id("ab"), 2);
    EXPECT_EQ(tok.token_id("<|im_end|>"), std::nullopt);
    EXPECT_EQ(tok.vocab_size(), 4u);
    EXPECT_EQ(tok.encode("ab<|im_start|>aba"), (std::vector<std::int64_t>{2, 3, 2, 0}));
    EXPECT_EQ(tok.encode(""), std::vector<std::int64_t>{});
}

TEST_F(BpeTokenizerUnit, RefusesUnsupportedModelType) {
    Json j = small_tokenizer();
    j["model"]["type"] = "WordPiece";
    const std::string m = refusal("wordpiece.json", j);
    EXPECT_NE(m.find("model.type"), std::string::npos) << m;
    EXPECT_NE(m.find("WordPiece"), std::string::npos) << m;
}

TEST_F(BpeTokenizerUnit, RefusesUnsupportedNormalizer) {
    Json j = small_tokenizer();
    j["normalizer"] = Json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})");
    const std::string m = refusal("lowercase.json", j);
    EXPECT_NE(m.find("normalizer.normalizers[1].type"), std::string::npos) << m;
    j["normalizer"] = Json::parse(R"({"type": "Lowercase"})");
    EXPECT_NE(refusal("lowercase2.json", j).find("normalizer.type"), std::string::npos);
}

TEST_F(BpeTokenizerUnit, RefusesOtherUnsupportedKeys) {
    struct Case {
        const char * key;
        Json patch;
    };
    const Case cases[] = {
        {"model.byte_fallback", Json::parse(R"({"model": {"byte_fallback": true}})")},
        {"model.unk_token", Json::parse(R"({"model": {"unk_token": "<unk>"}})")},
        {"model.dropout", Json::parse(R"({"model": {"dropout": 0.1}})")},
        {"model.merges[0]", Json::parse(R"({"model": {"merges": [["a", "c"]]}})")},
        {"truncation", Json::parse(R"({"truncation": {"max_length": 8}})")},
        {"post_processor.type", Json::parse(R"({"post_processor": {"type": "RobertaProcessing"}})")},
        {"pre_tokenizer.type", Json::parse(R"({"pre_tokenizer": {"type": "Whitespace"}})")},
        {"pre_tokenizer.pattern",
         Json::parse(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated",
                         "invert": false}})")},
        {"pre_tokenizer.behavior",
         Json::parse(R"({"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways",
                         "invert": false}})")},
    };
    int i = 0;
    for (const Case & c : cases) {
        Json j = small_tokenizer();
        j.merge_patch(c.patch);
        const std::string m = refusal("case" + std::to_string(i++) + ".json", j);
        EXPECT_NE(m.find(c.key), std::string::npos) << "expected the key " << c.key << " in: " << m;
    }
}

TEST_F(BpeTokenizerUnit, RefusesMissingAndInvalidFiles) {
    const fs::path missing = dir_ / "no_such_tokenizer.json";
    try {
        BpeTokenizer::from_file(missing);
        ADD_FAILURE() << "a missing file loaded";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
    }
    const fs::path broken = dir_ / "broken.json";
    std::ofstream(broken) << "{\"model\": ";
    try {
        BpeTokenizer::from_file(broken);
        ADD_FAILURE() << "a truncated file loaded";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find(broken.string()), std::string::npos) << e.what();
    }
}

TEST_F(BpeTokenizerUnit, RefusesInvalidUtf8Input) {
    const BpeTokenizer tok = BpeTokenizer::from_file(write("tokenizer.json", small_tokenizer()));
    for (const std::string & bad : {std::string("a\xff"), std::string("a\xc0\xaf"), std::string("a\xed\xa0\x80"),
                                  std::string("a\xe4\xb8")}) {
        try {
            tok.encode(bad);
            ADD_FAILURE() << "invalid UTF-8 " << escaped(bad) << " was encoded";
        } catch (const ddo::UsageError & e) {
            EXPECT_NE(std::string(e.what()).find("UTF-8 at byte offset 1"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
