// Ltx2PromptEncoder: the LTX2Pipeline's prompt path from text to the stacked Gemma-3 hidden states the connectors
// take (models.md §5.8). Reference: diffusers 0.42.1 pipelines/ltx2/pipeline_ltx2.py, LTX2Pipeline.encode_prompt and
// _get_gemma_prompt_embeds: each prompt str.strip()ped (Python semantics: Unicode whitespace), tokenized with
// add_special_tokens, padding="max_length" on the left (pad = eos when the tokenizer has none), truncation at
// max_sequence_length; Gemma3ForConditionalGeneration(..., output_hidden_states=True); the num_layers + 1 hidden
// states stacked on a new last axis and flattened to [B, L, hidden * (layers + 1)] (index h * (layers + 1) + state),
// cast to the text encoder's dtype; the negative prompt "" when guidance needs one; the num_videos_per_prompt repeat.
//
// Not implemented, refused with ddo::UsageError naming the file and key: LTX-2.5's Gemma 4 text encoder
// (model_type gemma4_unified / gemma4), any text encoder class other than Gemma-3, a checkpoint saved without its
// text encoder. Prompt enhancement (LTX2Pipeline's enable_prompt_enhancement / system_prompt, off by default: a
// generate() run of the text encoder or the prompt_enhancer) is not part of this path; the plugin refuses those
// settings.
// Note [LTX-2 num_videos_per_prompt row order] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddo/model/component_weights.hpp"
#include "gemma3_text_model.hpp"
#include "sentencepiece_tokenizer.hpp"

namespace ddo::ltx2 {

// One side (positive or negative) of encode_prompt's result.
struct PromptEmbeddings {
    at::Tensor embeds;                       // [B, L, hidden * (layers + 1)] in the requested dtype, on the device
    at::Tensor mask;                         // [B, L] int64, 1 = token, 0 = left padding, on the device
    std::vector<std::int64_t> token_counts;  // per row of `mask`: its tokens after truncation (BOS included)
};

struct EncodedPrompts {
    PromptEmbeddings positive;
    std::optional<PromptEmbeddings> negative;  // set when classifier-free guidance is on
};

// Python's str.strip() on UTF-8: drops leading and trailing code points for which str.isspace() is true (ASCII
// whitespace, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000;
// not U+200B or U+FEFF). Stops at bytes that are not valid UTF-8 (the tokenizer refuses them, naming the offset).
std::string strip_prompt(std::string_view utf8);

class Ltx2PromptEncoder {
public:
    // `checkpoint_dir` (borrowed): an LTX2Pipeline checkpoint with text_encoder/ (Gemma3ForConditionalGeneration's
    // save_pretrained) and tokenizer/ (tokenizer.model; tokenizer.json and tokenizer_config.json when present).
    // Reads model_index.json when present (its text_encoder and tokenizer classes), text_encoder/config.json
    // (model_type), the Gemma-3 config and the weights' header (every tensor checked, nothing loaded) and the
    // tokenizer. UsageError naming the file and key for what is not implemented, RuntimeError naming tensor and
    // file for a broken checkpoint.
    // weights_file: --text-encoder FILE, replacing text_encoder/'s weights (Note [Component files]); empty: none.
    static Ltx2PromptEncoder open(const std::filesystem::path & checkpoint_dir,
                                  const std::filesystem::path & weights_file = {});

    const text::Gemma3TextConfig & config() const noexcept { return config_; }
    // For ModelRun::open_weights(run.plan("text_encoder"), text_encoder_dir(), groups(), dtype).
    const std::vector<model::GroupSpec> & groups() const noexcept { return groups_; }
    const std::filesystem::path & text_encoder_dir() const noexcept { return text_encoder_dir_; }
    store::ComponentSource text_encoder() const { return {text_encoder_dir_, weights_file_}; }
    // The tokenizer/ files read (for the report): tokenizer.model, then tokenizer.json / tokenizer_config.json.
    const std::vector<std::filesystem::path> & tokenizer_files() const noexcept { return tokenizer_files_; }
    const text::SentencePieceTokenizer & tokenizer() const noexcept { return tokenizer_; }
    // hidden * (layers + 1): what the connectors' caption_channels * text_proj_in_factor must equal.
    std::int64_t features() const noexcept { return config_.hidden_size * (config_.num_layers + 1); }

    // _get_gemma_prompt_embeds(prompts, num_videos_per_prompt=1, max_sequence_length, device, dtype). `weights`
    // (borrowed): the text encoder opened with groups(); its groups are acquired and released one by one.
    // UsageError for no prompts, max_sequence_length < 1 or too small for the special tokens.
    PromptEmbeddings encode(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                            std::int64_t max_sequence_length, at::ScalarType dtype, at::Device device,
                            const text::Gemma3Callbacks & callbacks = {}) const;

    // encode_prompt(prompts, negative_prompts, do_classifier_free_guidance, num_videos_per_prompt,
    // max_sequence_length): with guidance, the negative prompts are `negative_prompts` (nullopt or empty: "" for
    // every prompt, as `negative_prompt or ""`; one: repeated for every prompt, as a str; else one per prompt,
    // UsageError otherwise). num_videos_per_prompt repeats as the reference does: embeds row-wise per prompt
    // (p0, p0, p1, p1), the mask batch-wise (p0, p1, p0, p1); the two orders agree for one prompt.
    EncodedPrompts encode_prompt(model::ComponentWeights & weights, const std::vector<std::string> & prompts,
                                 const std::optional<std::vector<std::string>> & negative_prompts,
                                 bool do_classifier_free_guidance, std::int64_t num_videos_per_prompt,
                                 std::int64_t max_sequence_length, at::ScalarType dtype, at::Device device,
                                 const text::Gemma3Callbacks & callbacks = {}) const;

private:
    Ltx2PromptEncoder(text::Gemma3TextConfig config, std::vector<model::GroupSpec> groups,
                      std::filesystem::path text_encoder_dir, std::vector<std::filesystem::path> tokenizer_files,
                      text::SentencePieceTokenizer tokenizer);

    text::Gemma3TextConfig config_;
    std::vector<model::GroupSpec> groups_;
    std::filesystem::path text_encoder_dir_;
    std::filesystem::path weights_file_;
    std::vector<std::filesystem::path> tokenizer_files_;
    text::SentencePieceTokenizer tokenizer_;
};

}  // namespace ddo::ltx2
