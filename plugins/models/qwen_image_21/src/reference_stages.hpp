// The stages a run with condition images adds to qwen_image_21's (plugin_run.cpp), as QwenImage21Pipeline.__call__
// runs them: resolve_references (read, resize, the output size from the last reference) -> encode_vision (the
// Qwen3-VL vision tower on its own plan, phase "encode_vision", unloaded before the text tower) -> the text tower
// with the vision features (prompt_encoder) -> encode_reference_latents (the VAE encoder, phase "encode_image":
// retrieve_latents(sample_mode="argmax"), normalised, packed) -> denoise with the references before the target.
// Note [Qwen-Image 2.1 references] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/model/component_plan.hpp"
#include "ddo/model/model_run.hpp"
#include "pipeline.hpp"
#include "prompt_encoder.hpp"
#include "references.hpp"

namespace ddo::qwen_image_21 {

struct References {
    std::vector<Reference> items;
    std::int64_t output_resolution = 1024;  // plugin.qwen_image_21.output_resolution
    text::Qwen2VlImageProcessorConfig processor;
    std::filesystem::path processor_file;   // processor/preprocessor_config.json
    bool any() const noexcept { return !items.empty(); }
};

// workload.images read and prepared (at most kMaxReferences, no @FRAME); when workload.width / height are unset,
// they become the last reference's calculate_dimensions size (the pipeline's default). Records each image's
// preprocessing. UsageError (exit 2) for too many images, a frame suffix, strength (Qwen-Image 2.1 has no
// strength img2img), prompt embeddings from a file (the text encoder must see the images) and `ddo-host encode`.
References resolve_references(model::ModelRun & run, model::Workload & w, bool prompt_from_text, bool encode_only);

// The vision tower over all references at once (one sequence per image: images never attend to one another).
PromptImages encode_vision(model::ModelRun & run, const model::ComponentPlan & plan, const PromptEncoder & encoder,
                           const References & refs, at::ScalarType dtype, at::Device device);

// Each reference through the VAE encoder (the VAE plan's strategy for its size), normalised and packed.
ReferenceLatents encode_reference_latents(model::ModelRun & run, const ModelFiles & m, const model::ComponentPlan & vae,
                                          const References & refs, at::ScalarType dtype, at::Device device);

// The report's workload.references: per image its size, vision tokens and latent tokens.
nlohmann::json references_json(const References & refs);

}  // namespace ddo::qwen_image_21
