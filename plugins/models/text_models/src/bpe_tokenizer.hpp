// BpeTokenizer: the byte-level BPE of a Hugging Face tokenizer.json (Qwen2/Qwen3/Qwen3-VL layout), giving exactly
// the ids of the Python `tokenizers` library's Tokenizer.from_file(p).encode(text).ids. Checked against it by
// tests/parity/bpe_tokenizer_parity_test.cpp on the corpora of tools/reference/tokenizer_fixtures.py.
//
// Supported (the rest of tokenizer.json is refused, see below):
//   added_tokens    split out first, leftmost-longest: normalized=false tokens on the raw text, then normalized=true
//                   ones on each normalized piece; lstrip/rstrip (absorb adjacent Unicode White_Space), single_word.
//                   An added token is emitted as its id and never pre-tokenized; `special` does not change encode.
//                   Ids are assigned as `tokenizers` assigns them on load (a vocabulary token keeps its id, a new one
//                   gets the next id after the vocabulary), not taken from the file's "id" fields.
//   normalizer      null, NFC, NFD, NFKC, NFKD (utf8proc) and Sequence of those. The ~250 code points whose
//                   normalisation utf8proc (Unicode 15) knows and tokenizers' tables (Unicode 9) do not are kept as
//                   they are, as tokenizers does.
//   pre_tokenizer   null, Split {pattern Regex|String, behavior Isolated|Removed|MergedWithPrevious|MergedWithNext|
//                   Contiguous, invert}, ByteLevel {add_prefix_space, use_regex (the GPT-2 regex)} and Sequence of
//                   those. Regexes run on PCRE2 (UTF+UCP, multi-line anchors) where `tokenizers` uses Oniguruma;
//                   \s \S \p{L} \P{L} \p{N} \P{N} are rewritten to Oniguruma's sets (\s: Unicode White_Space, PCRE2
//                   also counts U+180E; \p{L} \p{N}: Oniguruma has Unicode 16, PCRE2 10.42 Unicode 14).
//   model           BPE: vocab, merges ([a, b] pairs or legacy "a b" strings), ignore_merges; merged by rank as
//                   tokenizers' word.rs (lowest rank first, leftmost on ties). Characters not in the vocabulary are
//                   dropped, as tokenizers does with unk_token null. Values tokenizers treats as the defaults are
//                   accepted: "" for continuing_subword_prefix/end_of_word_suffix, dropout 0, fuse_unk true (inert
//                   with unk_token null).
//   post_processor  null, ByteLevel (adds nothing), TemplateProcessing (the `single` template), Sequence of those.
//   decoder         ignored (encode only).
// Refused with ddo::UsageError naming the file and the JSON key: other normalizer/pre-tokenizer/model/post-processor
// types, non-null truncation or padding, BPE unk_token, a non-empty continuing_subword_prefix/end_of_word_suffix,
// dropout other than 0, byte_fallback true, Split regexes using \w \W \b \B \h \H, \S inside a class, nested or
// POSIX classes (whose meaning differs between Oniguruma and PCRE2), and merges naming tokens not in the vocabulary.
// Input text that is not valid UTF-8 is refused (ddo::UsageError with the byte offset). encode() is const and keeps
// no mutable state: one tokenizer may be used from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddo::text {

class BpeTokenizer {
public:
    // Throws ddo::UsageError (ddo/error.hpp) naming the file and the key for anything it does not implement,
    // and for a missing/unreadable/invalid file (naming the file and what to do).
    static BpeTokenizer from_file(const std::filesystem::path & tokenizer_json);
    // The same from the file's text in memory (from_file reads the file and calls this); `source` names it in errors.
    static BpeTokenizer from_json(std::string_view tokenizer_json_text, const std::string & source);
    // tokenizers' Tokenizer.encode(text).ids (add_special_tokens = true: the post-processor's tokens, if any).
    std::vector<std::int64_t> encode(std::string_view utf8) const;
    // The id of a vocabulary or added token, exactly as written (e.g. "<|im_start|>").
    std::optional<std::int64_t> token_id(std::string_view token) const;
    std::size_t vocab_size() const noexcept;  // vocabulary + added tokens (distinct strings, as get_vocab_size())

    BpeTokenizer(BpeTokenizer &&) noexcept;
    BpeTokenizer & operator=(BpeTokenizer &&) noexcept;
    BpeTokenizer(const BpeTokenizer &) = delete;
    BpeTokenizer & operator=(const BpeTokenizer &) = delete;
    ~BpeTokenizer();

private:
    struct Impl;
    explicit BpeTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::text
