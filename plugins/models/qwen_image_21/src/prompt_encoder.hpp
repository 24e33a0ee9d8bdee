// The QwenImage21Pipeline's text path (_get_qwen_prompt_embeds): each prompt in the pipeline's raw ChatML
// template (not apply_chat_template), tokenized with the checkpoint's tokenizer.json, left padded in a batch,
// through the Qwen3-VL text tower (text_models/qwen3_text_model.hpp) to the last layer's output before the final
// norm; the padding removed, the system turn's tokens dropped (the drop index), rows right padded with zeros and
// a mask when the prompts' lengths differ. With condition images the template is prompt_template_ti2i: one vision
// block per reference before the prompt, each <|image_pad|> expanded to its image's tokens, the vision tower's
// features in those slots (text_models/qwen3_text_model.hpp), and an image_pad_mask marking them.
#pragma once

#include "ddo/store/component_source.hpp"

#include <filesystem>
#include <functional>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "bpe_tokenizer.hpp"
#include "ddo/model/component_weights.hpp"
#include "qwen3_text_model.hpp"
#include "qwen3_vision_model.hpp"

namespace ddo::qwen_image_21 {

struct EncodedPrompts {
    at::Tensor embeds;                // [B, L, hidden]
    std::optional<at::Tensor> mask;   // [B, L] bool; none when no row is padded (encode_prompt drops it)
    std::vector<std::int64_t> tokens; // template tokens per prompt (before the drop)
    std::optional<at::Tensor> image_pad_mask;  // [B, L] bool: the references' slots; none without references
};

// The references as the text tower sees them: the vision tower's output for all of them (in order), their patch
// grids, and the <|image_pad|> tokens each takes in the prompt.
struct PromptImages {
    text::VisionFeatures features;
    std::vector<std::array<std::int64_t, 3>> grid_thw;
    std::vector<std::int64_t> tokens;
    std::int64_t spatial_merge_size = 2;
};

class PromptEncoder {
public:
    // <model>/text_encoder/config.json and the tokenizer (<model>/processor/tokenizer.json, else
    // <model>/tokenizer/tokenizer.json). UsageError naming the missing file and what a whole checkpoint holds.
    // weights_file: --text-encoder FILE, replacing text_encoder/'s weights (Note [Component files]); empty: none.
    static PromptEncoder open(const std::filesystem::path & model_dir, const std::filesystem::path & weights_file = {});

    const text::Qwen3TextConfig & config() const noexcept { return config_; }
    const std::filesystem::path & tokenizer_file() const noexcept { return tokenizer_file_; }
    std::filesystem::path weights_dir() const { return model_dir_ / "text_encoder"; }
    store::ComponentSource weights() const { return {weights_dir(), weights_file_}; }
    // Tokens of the system turn the pipeline drops from the hidden states (its _drop_idx).
    std::int64_t drop_index() const noexcept { return drop_idx_; }
    // The template's token ids for one prompt (an empty prompt is encoded as " ", as the pipeline does), with one
    // vision block per entry of image_tokens (its <|image_pad|> expanded to that many tokens). UsageError when the
    // prompt itself holds a vision token.
    std::vector<std::int64_t> template_ids(const std::string & prompt,
                                           const std::vector<std::int64_t> & image_tokens = {}) const;
    // The tower's execution groups (component text_encoder), from the checkpoint's tensor names.
    std::vector<model::GroupSpec> groups();
    // The vision tower's execution groups (component vision_tower) in the same files; sets c.weight_prefix.
    std::vector<model::GroupSpec> vision_groups(text::Qwen3VisionConfig & c) const;

    // images: the references' vision features (null: text to image).
    EncodedPrompts encode(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                          at::ScalarType dtype, at::Device device, const text::TextTowerCallbacks & cb = {},
                          const PromptImages * images = nullptr) const;

private:
    PromptEncoder(std::filesystem::path model_dir, text::Qwen3TextConfig c, std::filesystem::path tokenizer_file,
                  text::BpeTokenizer tokenizer);
    std::vector<std::string> tensor_names() const;  // of the text encoder's files, from their headers
    std::filesystem::path model_dir_;
    std::filesystem::path weights_file_;
    text::Qwen3TextConfig config_;
    std::filesystem::path tokenizer_file_;
    text::BpeTokenizer tokenizer_;
    std::int64_t drop_idx_ = 0;
    std::int64_t image_pad_id_ = -1;
};

}  // namespace ddo::qwen_image_21
