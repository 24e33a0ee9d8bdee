// What both LTX-2 plugins (ltx2_video, ltx2_image) do around the math on the model kit, written once: the
// --prompt-embeds file (LTX2Pipeline's prompt_embeds / prompt_attention_mask / negative_*: the stacked Gemma-3
// hidden states), the text stage (Gemma-3 on the engine as component text_encoder, unloaded before the connectors;
// `ddo-host encode` writes its output and ends the run), engine-backed components viewed as ltx2::Weights, and the
// connectors stage with the dry run's end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "connectors.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/model_run.hpp"
#include "ddo/model/run_request.hpp"
#include "original_names.hpp"
#include "prompt_encoder.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

struct PromptEmbeds {
    at::Tensor embeds, mask;                         // [1, L, C*F] float32, [1, L] int64
    std::optional<at::Tensor> neg_embeds, neg_mask;  // negative_prompt_embeds (+ mask), when present
};

// One prompt's embeddings ([1, L, C*F] or [1, L, C, F]; masks optional, all ones when absent). UsageError naming
// the file and tensor for another shape, a batch other than 1, or negative embeddings of another length.
PromptEmbeds load_prompt_embeds(const std::filesystem::path & path, const ConnectorsConfig & c);

// A component's weights on the engine (run.open_weights on `plan`) and the ltx2::Weights view the math reads.
struct EngineComponent {
    std::vector<model::GroupSpec> groups;
    std::unique_ptr<model::ComponentWeights> weights;
    std::unique_ptr<EngineWeights> view;
};
EngineComponent open_engine_component(model::ModelRun & run, const model::ComponentPlan & plan,
                                      const std::string & folder, std::vector<model::GroupSpec> groups,
                                      at::ScalarType dtype);
// The same component's weights planned for the memory forecast only (run.forecast_weights; nothing read or allocated).
void forecast_engine_component(model::ModelRun & run, const model::ComponentPlan & plan, const std::string & folder,
                               std::vector<model::GroupSpec> groups, at::ScalarType dtype);
// The phase boundary: the view goes, then run.unload (outstanding owners checked 0).
void unload(model::ModelRun & run, EngineComponent & c);

// The checkpoint's prompt encoder, checked against the connectors it feeds (RuntimeError naming
// text_encoder/config.json when its hidden states are not what they read), its tokenizer files recorded as inputs
// and its size as checkpoint facts.
Ltx2PromptEncoder open_prompt_encoder(model::ModelRun & run, const ConnectorsConfig & c);

struct TextRequest {
    std::string plugin;                    // for the embeddings file's metadata
    std::string prompt;
    std::optional<std::string> negative;   // -n
    bool guidance = false;                 // classifier-free guidance runs: the negative prompt ("" by default) too
    bool encode_only = false;              // ddo-host encode
    int64_t max_sequence_length = 1024;
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
};

// The text stage: Gemma-3 on run.plan("text_encoder") in phase "encode" (one progress count over both prompts'
// layers), unloaded before anything else opens. Returns the embeddings, or nullopt when the run ends here
// (`ddo-host encode`: the file written; a dry run of it: validated). A dry run of a generating run returns empty
// embeddings after tokenizing the prompt.
std::optional<PromptEmbeds> run_text_stage(model::ModelRun & run, const Ltx2PromptEncoder & encoder,
                                           const TextRequest & r);

// plugin.<plugin>.max_sequence_length (default 1024, `whose_default`: the pipeline whose default that is);
// UsageError below 1.
int64_t max_sequence_length(const model::ModelRun & run, const std::string & whose_default);

// The connectors stage's weights, opened on `connectors` after the text stage. A dry run ends here: the DiT is
// opened on `transformer` too (its files checked on the engine), both are unloaded, what was validated is logged
// and the result is nullopt. Otherwise the run is in phase "encode" (the text encoder's, when it ran).
struct EngineStage {
    const model::ComponentPlan & plan;
    std::vector<model::GroupSpec> groups;
};
std::optional<EngineComponent> open_connectors(model::ModelRun & run, EngineStage connectors, EngineStage transformer,
                                               at::ScalarType dtype, const model::PromptSource & prompt);

}  // namespace ddo::ltx2
