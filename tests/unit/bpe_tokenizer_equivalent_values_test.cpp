// ddo::text::BpeTokenizer accepts tokenizer.json values that the Python `tokenizers` library treats as the supported
// default: "" for model.continuing_subword_prefix / end_of_word_suffix (what a tokenizer trained with `tokenizers`
// writes; format!("{prefix}{s}") adds nothing), fuse_unk true with unk_token null (it only fuses unk ids), dropout 0
// and the optional keys left out. Each variant must encode exactly the ids of the null/false spelling, and those ids are the
// ones tokenizers 0.23.3 gives for this tokenizer.json (Tokenizer.from_str(...).encode(text).ids).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpe_tokenizer.hpp"
#include "ddo/error.hpp"

using ddo::text::BpeTokenizer;
using Json = nlohmann::json;

namespace {

// A byte-level BPE in the Qwen layout, small enough to check by hand: "Ġ" is the byte-level space.
Json base_tokenizer() {
    Json vocab = Json::object();
    const char * const tokens[] = {"a", "b", "c", "d", "\u0120", "ab", "abc", "\u0120a", "\u0120ab", "cd", "<|x|>"};
    for (std::size_t i = 0; i < std::size(tokens); ++i) vocab[tokens[i]] = i;
    return Json{
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", Json::array({Json{{"id", 10}, {"content", "<|x|>"}, {"single_word", false}, {"lstrip", false},
                                           {"rstrip", false}, {"normalized", false}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer", Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                               {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", nullptr},
        {"model", Json{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                       {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
                       {"merges", Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"}),
                                               Json::array({"\u0120", "a"}), Json::array({"\u0120a", "b"}),
                                               Json::array({"c", "d"})})}}}};
}

const std::vector<std::string> kTexts = {"abcd ab abc<|x|>dab zz a", "cdab  abab"};
// tokenizers 0.23.3 on base_tokenizer() ("z" is not in the vocabulary: dropped, unk_token is null).
const std::vector<std::vector<std::int64_t>> kReferenceIds = {{6, 3, 4, 5, 4, 6, 10, 3, 5, 4, 7}, {9, 5, 4, 4, 5, 5}};

std::vector<std::vector<std::int64_t>> encode_all(const Json & tokenizer_json) {
    const BpeTokenizer tok = BpeTokenizer::from_json(tokenizer_json.dump(), "equivalent.json");
    std::vector<std::vector<std::int64_t>> out;
    for (const std::string & text : kTexts) out.push_back(tok.encode(text));
    return out;
}

Json with_model_key(const char * key, Json value) {
    Json j = base_tokenizer();
    j["model"][key] = std::move(value);
    return j;
}

}  // namespace

TEST(BpeTokenizerEquivalentValuesTest, NullSpellingMatchesTokenizers) {
    EXPECT_EQ(encode_all(base_tokenizer()), kReferenceIds);
}

TEST(BpeTokenizerEquivalentValuesTest, EmptyContinuingSubwordPrefixIsNull) {
    EXPECT_EQ(encode_all(with_model_key("continuing_subword_prefix", "")), kReferenceIds);
}

TEST(BpeTokenizerEquivalentValuesTest, EmptyEndOfWordSuffixIsNull) {
    EXPECT_EQ(encode_all(with_model_key("end_of_word_suffix", "")), kReferenceIds);
}

TEST(BpeTokenizerEquivalentValuesTest, FuseUnkWithoutUnkTokenIsInert) {
    EXPECT_EQ(encode_all(with_model_key("fuse_unk", true)), kReferenceIds);
}

TEST(BpeTokenizerEquivalentValuesTest, ZeroDropoutIsNull) {
    EXPECT_EQ(encode_all(with_model_key("dropout", 0.0)), kReferenceIds);
}

TEST(BpeTokenizerEquivalentValuesTest, AbsentOptionalModelKeysAreNull) {
    Json j = base_tokenizer();
    for (const char * key : {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                             "fuse_unk", "byte_fallback", "ignore_merges"})
        j["model"].erase(key);
    EXPECT_EQ(encode_all(j), kReferenceIds);
}

// What is not equivalent stays refused, naming the key.
TEST(BpeTokenizerEquivalentValuesTest, NonEmptyPrefixSuffixUnkTokenAndByteFallbackAreRefused) {
    const auto refused = [](const Json & j, const std::string & key) {
        try {
            BpeTokenizer::from_json(j.dump(), "equivalent.json");
            ADD_FAILURE() << key << " was accepted";
        } catch (const ddo::UsageError & e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    };
    refused(with_model_key("continuing_subword_prefix", "##"), "model.continuing_subword_prefix");
    refused(with_model_key("end_of_word_suffix", "</w>"), "model.end_of_word_suffix");
    refused(with_model_key("unk_token", "a"), "model.unk_token");
    refused(with_model_key("byte_fallback", true), "model.byte_fallback");
}
