#include "prompt_encoder.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/store/weight_store.hpp"

namespace ddo::qwen_image_21 {
namespace {

namespace fs = std::filesystem;

// QwenImage21Pipeline.prompt_template_t2i verbatim (sys_prompt "Comprehend and analyze the provided prompt.").
constexpr std::string_view kSystemTurn = "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n";
constexpr std::string_view kUserOpen = "<|im_start|>user\n";
constexpr std::string_view kUserClose = "<|im_end|>\n<|im_start|>assistant\n";
std::string system_turn() { return std::string(kSystemTurn); }
std::string t2i_template(const std::string & prompt) {
    std::string s;
    s.reserve(kSystemTurn.size() + kUserOpen.size() + prompt.size() + kUserClose.size());
    s.append(kSystemTurn).append(kUserOpen).append(prompt).append(kUserClose);
    return s;
}

}  // namespace

PromptEncoder::PromptEncoder(fs::path model_dir, text::Qwen3TextConfig c, fs::path tokenizer_file,
                             text::BpeTokenizer tokenizer)
    : model_dir_(std::move(model_dir)), config_(std::move(c)), tokenizer_file_(std::move(tokenizer_file)),
      tokenizer_(std::move(tokenizer)) {
    for (const char * t : {"<|im_start|>", "<|im_end|>"})
        if (!tokenizer_.token_id(t))
            throw UsageError(tokenizer_file_.string() + ": has no token " + t +
                             "; the Qwen-Image 2.1 prompt template needs the Qwen3-VL tokenizer's ChatML tokens");
    // The pipeline's _drop_idx is len(apply_chat_template(system message)): the Qwen3-VL chat template renders a
    // system message exactly as the system turn of prompt_template_t2i, so it is that turn's token count (the
    // parity test checks it against the pipeline's own value).
    drop_idx_ = std::int64_t(tokenizer_.encode(system_turn()).size());
}

PromptEncoder PromptEncoder::open(const fs::path & model_dir, const fs::path & weights_file) {
    const fs::path config = model_dir / "text_encoder" / "config.json";
    if (!fs::is_regular_file(config))
        throw UsageError(config.string() + " is missing: a prompt (-p) needs the Qwen3-VL text encoder of a checkpoint "
                         "saved whole by QwenImage21Pipeline.save_pretrained (text_encoder/, processor/, transformer/, "
                         "vae/, scheduler/); or pass --prompt-embeds FILE (ddo-host encode writes one)");
    fs::path tok;
    for (const char * sub : {"processor", "tokenizer"})
        if (fs::is_regular_file(model_dir / sub / "tokenizer.json")) {
            tok = model_dir / sub / "tokenizer.json";
            break;
        }
    if (tok.empty())
        throw UsageError((model_dir / "processor" / "tokenizer.json").string() +
                         " is missing (nor tokenizer/tokenizer.json): the prompt cannot be tokenized; save the "
                         "pipeline with its processor (QwenImage21Pipeline.save_pretrained writes processor/)");
    auto e = PromptEncoder(model_dir, text::Qwen3TextConfig::from_file(config), tok, text::BpeTokenizer::from_file(tok));
    e.weights_file_ = weights_file;
    return e;
}

std::vector<std::int64_t> PromptEncoder::template_ids(const std::string & prompt) const {
    // "Qwen has no bos token, so an empty string leaves the encoder with nothing to read" (the pipeline).
    auto ids = tokenizer_.encode(t2i_template(prompt.empty() ? std::string(" ") : prompt));
    // Vision slots are where condition images go (the ti2i template); they need the Qwen3-VL vision tower.
    for (const char * t : {"<|vision_start|>", "<|image_pad|>", "<|video_pad|>", "<|vision_end|>"})
        if (const auto id = tokenizer_.token_id(t))
            for (auto v : ids)
                if (v == *id)
                    throw UsageError(std::string("qwen_image_21: the prompt contains the vision token ") + t +
                                     ": condition images (the Qwen3-VL image slots) need the vision tower, which ddo "
                                     "does not have yet; remove the token (text-to-image only)");
    return ids;
}

std::vector<model::GroupSpec> PromptEncoder::groups() {
    auto store = store::WeightStore::open(weights());
    std::vector<std::string> names;
    for (const auto * t : store.tensors()) names.push_back(t->name);
    return text::qwen3_text_groups(config_, names);
}

EncodedPrompts PromptEncoder::encode(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                                     at::ScalarType dtype, at::Device device, const text::TextTowerCallbacks & cb) const {
    if (prompts.empty()) throw RuntimeError("qwen_image_21: no prompt to encode");
    std::vector<std::vector<std::int64_t>> ids;
    std::size_t longest = 0;
    for (const auto & p : prompts) {
        ids.push_back(template_ids(p));
        longest = std::max(longest, ids.back().size());
    }
    const auto B = std::int64_t(prompts.size()), L = std::int64_t(longest);
    // Left padding, as the processor pads for the pipeline (the pad id is never looked at: masked and dropped).
    auto id_t = at::zeros({B, L}, at::kLong), mask_t = at::zeros({B, L}, at::kLong);
    for (std::int64_t b = 0; b < B; ++b) {
        const auto & row = ids[std::size_t(b)];
        const auto off = L - std::int64_t(row.size());
        for (std::size_t i = 0; i < row.size(); ++i) {
            id_t[b][off + std::int64_t(i)] = row[i];
            mask_t[b][off + std::int64_t(i)] = 1;
        }
    }
    auto hidden = text::qwen3_last_hidden_before_norm(weights, config_, id_t, mask_t, dtype, device, cb);
    // _extract_masked_hidden, then the drop of the system turn, then zero padding on the right with a mask.
    std::vector<at::Tensor> rows;
    std::int64_t max_len = 0;
    for (std::int64_t b = 0; b < B; ++b) {
        const auto n = std::int64_t(ids[std::size_t(b)].size());
        if (n <= drop_idx_)
            throw RuntimeError("qwen_image_21: the prompt template has " + std::to_string(n) + " tokens, not more than "
                               "the system turn's " + std::to_string(drop_idx_) + ": the tokenizer does not match");
        rows.push_back(hidden[b].narrow(0, L - n + drop_idx_, n - drop_idx_));
        max_len = std::max(max_len, n - drop_idx_);
    }
    EncodedPrompts out;
    out.embeds = at::zeros({B, max_len, hidden.size(2)}, hidden.options());
    auto mask = at::zeros({B, max_len}, at::TensorOptions().dtype(at::kBool).device(hidden.device()));
    for (std::int64_t b = 0; b < B; ++b) {
        const auto n = rows[std::size_t(b)].size(0);
        out.embeds[b].narrow(0, 0, n).copy_(rows[std::size_t(b)]);
        mask[b].narrow(0, 0, n).fill_(true);
    }
    if (!mask.all().item<bool>()) out.mask = mask;  // encode_prompt: an all-valid mask is dropped
    out.tokens = ids.front();
    return out;
}

}  // namespace ddo::qwen_image_21
