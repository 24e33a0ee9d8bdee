// SentencePieceTokenizer: the Gemma (2/3) tokenizer of a checkpoint's tokenizer/ folder, giving the ids of the
// tokenizer LTX2Pipeline loads (transformers 5's AutoTokenizer -> GemmaTokenizer: a `tokenizers` BPE with byte
// fallback over tokenizer.json's vocabulary and merges, normalizer Replace(" ", "▁"), no pre-split, the added tokens
// of tokenizer.json split out first, BOS in front). ddo encodes with Debian's libsentencepiece over tokenizer.model
// (the model those vocabulary and merges were converted from) and checks at load that the two files belong together.
// Checked against transformers by tests/parity/sentencepiece_tokenizer_parity_test.cpp (fixtures of
// tools/reference/gemma3_fixtures.py).
//
// Files read from the folder:
//   tokenizer.model        required: the SentencePiece model. Refused (ddo::UsageError naming the file and the proto
//                          field) unless it is what GemmaTokenizer reproduces: trainer_spec.model_type BPE,
//                          normalizer_spec.name "identity" without a precompiled_charsmap, add_dummy_prefix false,
//                          remove_extra_whitespaces false, escape_whitespaces true.
//   tokenizer.json         optional: added_tokens (split out of the text before SentencePiece, leftmost-longest,
//                          emitted as their ids) and model.vocab, which must give every piece the id tokenizer.model
//                          gives it. Without it, the added tokens are the model's control, unknown and user-defined
//                          pieces (what transformers' conversion declares). Refused: an added token with lstrip,
//                          rstrip, single_word or normalized set; an added token whose id differs from the model's id
//                          of the same piece; model.type other than BPE.
//   tokenizer_config.json  optional: add_bos_token (default true, as GemmaTokenizer), add_eos_token (default false),
//                          bos_token / eos_token / pad_token (pad falls back to eos, as LTX2Pipeline does), and
//                          truncation_side (only "right" is implemented).
// Input text that is not valid UTF-8 is refused (ddo::UsageError with the byte offset). encode() is const and keeps
// no mutable state: one tokenizer may be used from several threads.
// Note [Which Gemma tokenizer file ddo reads] in docs/architecture.md.
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

class SentencePieceTokenizer {
public:
    // `tokenizer_dir`: borrowed path of the checkpoint's tokenizer/ folder. Throws ddo::UsageError naming the file
    // and the key for anything not implemented, ddo::RuntimeError naming the file for an unreadable model.
    static SentencePieceTokenizer from_dir(const std::filesystem::path & tokenizer_dir);

    // tokenizer(text, add_special_tokens=True).input_ids: BOS (add_bos_token), the text's ids, EOS (add_eos_token).
    std::vector<std::int64_t> encode(std::string_view utf8) const;

    // The pipeline's batch call: padding="max_length", truncation=True, left padding with pad_id(), row-major
    // [batch, max_length] ids and attention mask (1 = token, 0 = padding). Truncation keeps the first tokens and
    // then adds the special tokens, as transformers does. UsageError for max_length too small for the special tokens.
    struct Padded {
        std::int64_t batch = 0, length = 0;
        std::vector<std::int64_t> ids, mask;
    };
    Padded encode_left_padded(const std::vector<std::string> & texts, std::int64_t max_length) const;

    // The id of a piece or added token, exactly as written (e.g. "<start_of_turn>").
    std::optional<std::int64_t> token_id(std::string_view token) const;
    std::int64_t bos_id() const noexcept;
    std::int64_t pad_id() const noexcept;
    std::size_t vocab_size() const noexcept;  // pieces + added tokens beyond them

    SentencePieceTokenizer(SentencePieceTokenizer &&) noexcept;
    SentencePieceTokenizer & operator=(SentencePieceTokenizer &&) noexcept;
    SentencePieceTokenizer(const SentencePieceTokenizer &) = delete;
    SentencePieceTokenizer & operator=(const SentencePieceTokenizer &) = delete;
    ~SentencePieceTokenizer();

private:
    struct Impl;
    explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::text
