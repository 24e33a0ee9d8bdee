// Fuzz target: the byte-level BPE tokenizer's loader (ddo::text::BpeTokenizer::from_json, what from_file runs on a
// checkpoint's tokenizer.json; plugins/models/text_models/src/bpe_tokenizer.hpp). The input is a tokenizer.json's
// text: normalizers, pre-tokenizer regexes (rewritten for PCRE2 and compiled), the BPE vocabulary and merges, added
// tokens and the post-processor template. An accepted tokenizer then encodes a fixed set of texts (every script and
// whitespace form the pre-tokenizers split on), looks up tokens and counts its vocabulary.
#include "bpe_tokenizer.hpp"
#include "fuzz_support.hpp"

namespace {

constexpr std::string_view kTexts[] = {
    "",
    "a cat sitting on a mat",
    "Hello, World! don't can't we'll 1234567890 3.14159",
    "<|im_start|>system\nDescribe the image.<|im_end|>\n<|im_start|>user\n",
    "  leading and trailing spaces\t\ttabs\r\nnewlines\n\n",
    "\xe4\xb8\x80\xe5\x8f\xaa\xe7\x8c\xab \xe7\x8c\xab\xe3\x81\xa8\xe7\x8a\xac \xea\xb3\xa0\xec\x96\x91\xec\x9d\xb4",  // CJK, Hangul
    "Ünïcödé café naïve e\xcc\x81 \xef\xac\x81 \xe2\x85\xa0",  // composed, combining, ligature, Roman numeral
    "emoji \xf0\x9f\x90\xb1\xf0\x9f\x9a\x80\xe2\x9c\xa8 \xe2\x80\x8d \xc2\xa0nbsp",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    ddo::fuzz::accepted([&] {
        const auto tok = ddo::text::BpeTokenizer::from_json(ddo::fuzz::bytes(data, size), "fuzz/tokenizer.json");
        (void)tok.vocab_size();
        (void)tok.token_id("<|im_start|>");
        (void)tok.token_id("a");
        for (const std::string_view text : kTexts)
            ddo::fuzz::accepted([&] { (void)tok.encode(text); });
    });
    return 0;
}
