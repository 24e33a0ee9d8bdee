// Fuzz target: the byte-level BPE tokenizer's encode (ddo::text::BpeTokenizer::encode, plugins/models/text_models/
// src/bpe_tokenizer.hpp) on arbitrary bytes: UTF-8 validation, added-token matching (lstrip, rstrip, single_word),
// normalisation, every Split behaviour, ByteLevel and the merges. The tokenizers are fixed: the tokenizer.json seeds
// of the bpe_tokenizer_json target (tests/fuzz/corpus/bpe_tokenizer_json), read with from_file once. The input's
// first byte picks the tokenizer, the rest is the text. Encoding is const and deterministic: twice the same text
// gives the same ids.
#include <vector>

#include "bpe_tokenizer.hpp"
#include "fuzz_support.hpp"

namespace {

std::vector<ddo::text::BpeTokenizer> g_tokenizers;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const std::filesystem::path dir = std::filesystem::path(DDO_SOURCE_DIR) / "tests/fuzz/corpus/bpe_tokenizer_json";
    for (const char * name : {"qwen_tiny.json", "splits.json", "merged_with_next.json"})
        g_tokenizers.push_back(ddo::text::BpeTokenizer::from_file(dir / name));  // a refusal here is a broken seed
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    if (size == 0) return 0;
    const ddo::text::BpeTokenizer & tok = g_tokenizers[data[0] % g_tokenizers.size()];
    const std::string_view text = ddo::fuzz::bytes(data + 1, size - 1);
    std::vector<std::int64_t> first;
    if (ddo::fuzz::accepted([&] { first = tok.encode(text); }))
        DDO_FUZZ_CHECK(tok.encode(text) == first);
    return 0;
}
