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
// prompt_template_t2i, or prompt_template_ti2i with one "<imageN><|vision_start|><|image_pad|><|vision_end|>" per
// reference, joined by a space, before the prompt (QwenImage21Pipeline._get_qwen_prompt_embeds).
std::string prompt_template(const std::string & prompt, std::size_t images) {
    std::string s;
    s.append(kSystemTurn).append(kUserOpen);
    for (std::size_t i = 1; i <= images; ++i)
        s.append(i == 1 ? "" : " ").append("<image" + std::to_string(i) + "><|vision_start|><|image_pad|><|vision_end|>");
    s.append(prompt).append(kUserClose);
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
    if (const auto id = tokenizer_.token_id("<|image_pad|>")) image_pad_id_ = *id;
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

std::vector<std::int64_t> PromptEncoder::template_ids(const std::string & prompt,
                                                     const std::vector<std::int64_t> & image_tokens) const {
    // "Qwen has no bos token, so an empty string leaves the encoder with nothing to read" (the pipeline).
    const auto ids = tokenizer_.encode(prompt_template(prompt.empty() ? std::string(" ") : prompt, image_tokens.size()));
    // The template holds one vision block per reference; the prompt itself must hold none (its slots would have no
    // image, or shift the references' slots).
    const std::size_t want = image_tokens.size();
    for (const char * t : {"<|vision_start|>", "<|image_pad|>", "<|video_pad|>", "<|vision_end|>"})
        if (const auto id = tokenizer_.token_id(t)) {
            std::size_t n = 0;
            for (auto v : ids) n += v == *id;
            if (n != (std::string(t) == "<|video_pad|>" ? 0 : want))
                throw UsageError(std::string("qwen_image_21: the prompt contains the vision token ") + t + ": ddo places "
                                 "one vision block per condition image (--image FILE, " + std::to_string(want) +
                                 " given) before the prompt; remove the token from the prompt");
        }
    if (want == 0) return ids;
    // The processor expands each <|image_pad|> into its image's t*h*w / merge^2 tokens (Qwen3VLProcessor.__call__).
    std::vector<std::int64_t> out;
    out.reserve(ids.size());
    std::size_t image = 0;
    for (auto v : ids) {
        if (v != image_pad_id_) {
            out.push_back(v);
            continue;
        }
        out.insert(out.end(), std::size_t(image_tokens[image++]), v);
    }
    return out;
}

std::vector<std::string> PromptEncoder::tensor_names() const {
    auto store = store::WeightStore::open(weights());
    std::vector<std::string> names;
    for (const auto * t : store.tensors()) names.push_back(t->name);
    return names;
}

std::vector<model::GroupSpec> PromptEncoder::groups() { return text::qwen3_text_groups(config_, tensor_names()); }

std::vector<model::GroupSpec> PromptEncoder::vision_groups(text::Qwen3VisionConfig & c) const {
    return text::qwen3_vision_groups(c, tensor_names());
}

EncodedPrompts PromptEncoder::encode(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                                     at::ScalarType dtype, at::Device device, const text::TextTowerCallbacks & cb,
                                     const PromptImages * images) const {
    if (prompts.empty()) throw RuntimeError("qwen_image_21: no prompt to encode");
    const std::vector<std::int64_t> no_images;
    const auto & image_tokens = images ? images->tokens : no_images;
    std::vector<std::vector<std::int64_t>> ids;
    std::size_t longest = 0;
    for (const auto & p : prompts) {
        ids.push_back(template_ids(p, image_tokens));
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
    at::Tensor hidden;
    if (images && !image_tokens.empty()) {
        // Each prompt's template repeats the references' slots, so the processor is handed one set of images per
        // prompt: the same features for every row, in sequence order.
        text::VisionTokens v;
        v.embeds = images->features.embeds.repeat({B, 1});
        for (const auto & d : images->features.deepstack) v.deepstack.push_back(d.repeat({B, 1}));
        for (std::int64_t b = 0; b < B; ++b) v.grid_thw.insert(v.grid_thw.end(), images->grid_thw.begin(), images->grid_thw.end());
        v.image_token_id = image_pad_id_;
        v.spatial_merge_size = images->spatial_merge_size;
        hidden = text::qwen3_last_hidden_before_norm(weights, config_, id_t, mask_t, &v, dtype, device, cb);
    } else {
        hidden = text::qwen3_last_hidden_before_norm(weights, config_, id_t, mask_t, dtype, device, cb);
    }
    // _extract_masked_hidden, then the drop of the system turn, then zero padding on the right with a mask; the
    // image_pad_mask (True at <|image_pad|> positions) cropped and padded the same way.
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
    const auto bools = at::TensorOptions().dtype(at::kBool).device(hidden.device());
    auto mask = at::zeros({B, max_len}, bools);
    auto pads = at::zeros({B, max_len}, bools);
    for (std::int64_t b = 0; b < B; ++b) {
        const auto n = rows[std::size_t(b)].size(0);
        out.embeds[b].narrow(0, 0, n).copy_(rows[std::size_t(b)]);
        mask[b].narrow(0, 0, n).fill_(true);
        const auto & row = ids[std::size_t(b)];
        for (std::int64_t i = 0; i < n; ++i)
            if (row[std::size_t(drop_idx_ + i)] == image_pad_id_ && !image_tokens.empty()) pads[b][i] = true;
    }
    if (!mask.all().item<bool>()) out.mask = mask;  // encode_prompt: an all-valid mask is dropped
    if (!image_tokens.empty()) out.image_pad_mask = pads;
    out.tokens = ids.front();
    return out;
}

}  // namespace ddo::qwen_image_21
