// LTX2Pipeline's prompt path on the Gemma-3 tokenizer and text tower (prompt_encoder.hpp); the reference is
// diffusers 0.42.1 pipelines/ltx2/pipeline_ltx2.py (LTX2Pipeline.encode_prompt, _get_gemma_prompt_embeds).
#include "prompt_encoder.hpp"

#include <ATen/ATen.h>

#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"

namespace ddo::ltx2 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char * kUseGemma3 =
    "; ddo runs the Gemma-3 text encoder of LTX-2.0 / LTX-2.3 checkpoints (Gemma3ForConditionalGeneration): use such "
    "a checkpoint, or give the prompt embeddings directly (--prompt-embeds)";

json read_json(const fs::path & f) {
    std::ifstream in(f);
    if (!in) throw UsageError(f.string() + ": cannot be read; an LTX2Pipeline checkpoint holds it as save_pretrained "
                                           "wrote it");
    try {
        return json::parse(in);
    } catch (const std::exception & e) {
        throw UsageError(f.string() + ": not valid JSON (" + e.what() + ")");
    }
}

[[noreturn]] void refuse_gemma4(const fs::path & f, const std::string & key, const std::string & value) {
    throw UsageError(f.string() + ": " + key + " is \"" + value +
                     "\", the Gemma 4 text encoder of LTX-2.5 checkpoints, which ddo does not implement" + kUseGemma3);
}

bool is_gemma4(const std::string & s) { return s.rfind("gemma4", 0) == 0 || s.rfind("Gemma4", 0) == 0; }

// model_index.json's [library, class] entry `key` ("" when null or absent).
std::string index_class(const json & index, const fs::path & f, const std::string & key) {
    if (!index.contains(key)) return "";
    const auto & e = index.at(key);
    if (!e.is_array() || e.size() != 2) throw UsageError(f.string() + ": " + key + " is not a [library, class] pair");
    return e[1].is_string() ? e[1].get<std::string>() : "";
}

void check_model_index(const fs::path & f) {
    const json index = read_json(f);
    const std::string te = index_class(index, f, "text_encoder");
    if (te.empty())
        throw UsageError(f.string() + ": text_encoder is null: this checkpoint was saved without its text encoder, so "
                         "ddo cannot encode a prompt; give the prompt embeddings directly (--prompt-embeds) or use a "
                         "checkpoint with text_encoder/ and tokenizer/");
    if (is_gemma4(te)) refuse_gemma4(f, "text_encoder", te);
    if (te != "Gemma3ForConditionalGeneration")
        throw UsageError(f.string() + ": text_encoder is \"" + te + "\", not Gemma3ForConditionalGeneration" + kUseGemma3);
    const std::string tok = index_class(index, f, "tokenizer");
    if (tok.empty())
        throw UsageError(f.string() + ": tokenizer is null: this checkpoint was saved without its tokenizer; use a "
                         "checkpoint with tokenizer/ (tokenizer.model) or give the prompt embeddings directly "
                         "(--prompt-embeds)");
    if (tok != "GemmaTokenizer" && tok != "GemmaTokenizerFast")
        throw UsageError(f.string() + ": tokenizer is \"" + tok +
                         "\", not GemmaTokenizer / GemmaTokenizerFast (the tokenizer ddo implements for Gemma-3)");
}

void check_text_encoder_type(const fs::path & f) {
    const json j = read_json(f);
    const std::string type = j.contains("model_type") && j.at("model_type").is_string() ? j.at("model_type").get<std::string>() : "";
    if (is_gemma4(type)) refuse_gemma4(f, "model_type", type);
    if (type != "gemma3" && type != "gemma3_text")
        throw UsageError(f.string() + ": model_type is \"" + type + "\", not gemma3 (Gemma3ForConditionalGeneration) or "
                         "gemma3_text" + kUseGemma3);
}

// The code point starting at s[i] and its length in bytes; length 0 when the bytes there are not valid UTF-8.
std::pair<char32_t, std::size_t> decode_at(std::string_view s, std::size_t i) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return {0, 0};
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
        if ((b(i + k) & 0xC0) != 0x80) return {0, 0};
        cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0};
    return {cp, n};
}

// Python's str.isspace (Py_UNICODE_ISSPACE): bidirectional class WS, B or S, or general category Zs.
bool is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The reference's repeat for num_videos_per_prompt: embeds.repeat(1, n, 1).view(B * n, L, -1) and
// mask.repeat(n, 1).
PromptEmbeddings repeat_per_prompt(PromptEmbeddings e, std::int64_t n) {
    if (n == 1) return e;
    const auto B = e.embeds.size(0), L = e.embeds.size(1);
    e.embeds = e.embeds.repeat({1, n, 1}).view({B * n, L, -1});
    e.mask = e.mask.repeat({n, 1});
    std::vector<std::int64_t> counts;
    for (std::int64_t k = 0; k < n; ++k) counts.insert(counts.end(), e.token_counts.begin(), e.token_counts.end());
    e.token_counts = std::move(counts);
    return e;
}

}  // namespace

std::string strip_prompt(std::string_view s) {
    std::size_t begin = 0, end = s.size();
    while (begin < end) {
        const auto [cp, n] = decode_at(s, begin);
        if (n == 0 || !is_space(cp)) break;
        begin += n;
    }
    while (end > begin) {
        std::size_t start = end - 1;  // back over continuation bytes to the last code point's lead byte
        while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        const auto [cp, n] = decode_at(s, start);
        if (n != end - start || !is_space(cp)) break;
        end = start;
    }
    return std::string(s.substr(begin, end - begin));
}

Ltx2PromptEncoder::Ltx2PromptEncoder(text::Gemma3TextConfig config, std::vector<model::GroupSpec> groups,
                                     fs::path text_encoder_dir, std::vector<fs::path> tokenizer_files,
                                     text::SentencePieceTokenizer tokenizer)
    : config_(std::move(config)), groups_(std::move(groups)), text_encoder_dir_(std::move(text_encoder_dir)),
      tokenizer_files_(std::move(tokenizer_files)), tokenizer_(std::move(tokenizer)) {}

Ltx2PromptEncoder Ltx2PromptEncoder::open(const fs::path & checkpoint_dir, const fs::path & weights_file) {
    if (fs::exists(checkpoint_dir / "model_index.json")) check_model_index(checkpoint_dir / "model_index.json");
    const fs::path te = checkpoint_dir / "text_encoder", tok = checkpoint_dir / "tokenizer";
    check_text_encoder_type(te / "config.json");
    auto config = text::Gemma3TextConfig::from_file(te / "config.json");
    const auto weights = model::TensorFile::open_component(store::ComponentSource(te, weights_file));
    auto groups = text::gemma3_groups(config, weights.names());
    text::gemma3_check_weights(weights, config);

    auto tokenizer = text::SentencePieceTokenizer::from_dir(tok);
    if (std::int64_t(tokenizer.vocab_size()) > config.vocab_size)
        throw RuntimeError((tok / "tokenizer.model").string() + ": " + std::to_string(tokenizer.vocab_size()) +
                           " tokens, more than the text encoder's vocab_size " + std::to_string(config.vocab_size) +
                           " (" + (te / "config.json").string() + "): the tokenizer and the text encoder do not "
                           "belong together");
    std::vector<fs::path> files;
    for (const char * name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"})
        if (fs::exists(tok / name)) files.push_back(tok / name);
    auto e = Ltx2PromptEncoder(std::move(config), std::move(groups), te, std::move(files), std::move(tokenizer));
    e.weights_file_ = weights_file;
    return e;
}

PromptEmbeddings Ltx2PromptEncoder::encode(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                                           std::int64_t max_sequence_length, at::ScalarType dtype, at::Device device,
                                           const text::Gemma3Callbacks & callbacks) const {
    if (prompts.empty()) throw UsageError("LTX-2 prompt encoder: no prompt to encode");
    if (max_sequence_length < 1)
        throw UsageError("LTX-2 prompt encoder: max_sequence_length is " + std::to_string(max_sequence_length) +
                         "; it must be at least 1 (LTX2Pipeline's default is 1024)");
    std::vector<std::string> stripped;
    stripped.reserve(prompts.size());
    for (const auto & p : prompts) stripped.push_back(strip_prompt(p));
    const auto t = tokenizer_.encode_left_padded(stripped, max_sequence_length);
    const auto ids = at::tensor(t.ids).view({t.batch, t.length});
    const auto mask = at::tensor(t.mask).view({t.batch, t.length});

    PromptEmbeddings out;
    {
        auto states = text::gemma3_hidden_states(weights, config_, ids, mask, dtype, device, callbacks);
        out.embeds = at::stack(states, -1).flatten(2, 3).to(dtype);  // [B, L, hidden, states] -> h * states + s
    }
    out.mask = mask.to(device);
    for (std::int64_t b = 0; b < t.batch; ++b) {
        std::int64_t n = 0;
        for (std::int64_t i = 0; i < t.length; ++i) n += t.mask[std::size_t(b * t.length + i)];
        out.token_counts.push_back(n);
    }
    return out;
}

EncodedPrompts Ltx2PromptEncoder::encode_prompt(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                                                const std::optional<std::vector<std::string>> & negative_prompts,
                                                bool do_classifier_free_guidance, std::int64_t num_videos_per_prompt,
                                                std::int64_t max_sequence_length, at::ScalarType dtype,
                                                at::Device device, const text::Gemma3Callbacks & callbacks) const {
    if (num_videos_per_prompt < 1)
        throw UsageError("LTX-2 prompt encoder: num_videos_per_prompt is " + std::to_string(num_videos_per_prompt) +
                         "; it must be at least 1");
    EncodedPrompts out;
    out.positive = repeat_per_prompt(encode(weights, prompts, max_sequence_length, dtype, device, callbacks),
                                     num_videos_per_prompt);
    if (!do_classifier_free_guidance) return out;
    std::vector<std::string> negative;
    if (!negative_prompts || negative_prompts->empty())
        negative.assign(prompts.size(), "");
    else if (negative_prompts->size() == 1)
        negative.assign(prompts.size(), negative_prompts->front());
    else if (negative_prompts->size() == prompts.size())
        negative = *negative_prompts;
    else
        throw UsageError("LTX-2 prompt encoder: " + std::to_string(negative_prompts->size()) + " negative prompts for " +
                         std::to_string(prompts.size()) + " prompts; give one negative prompt, or one per prompt");
    out.negative = repeat_per_prompt(encode(weights, negative, max_sequence_length, dtype, device, callbacks),
                                     num_videos_per_prompt);
    return out;
}

}  // namespace ddo::ltx2
