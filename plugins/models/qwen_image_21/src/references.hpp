// Condition images of a Qwen-Image 2.1 run (the pipeline's `image=`, here --image FILE, repeatable): each reference
// resized once as QwenImage21Pipeline.__call__ does (converted to RGBA, calculate_dimensions(output_resolution^2,
// its own ratio), PIL Lanczos), then two copies: the VAE's (all four channels, x / 255 * 2 - 1, [1, 4, 1, H, W]) and
// the vision tower's (alpha composited over white, through the checkpoint's Qwen2-VL image processor). The output
// size, when not given, comes from the last reference's ratio. diffusers pipeline_qwenimage21.py is the reference
// (calculate_dimensions, __call__ step 1, _get_qwen_prompt_embeds). Note [Qwen-Image 2.1 references].
#pragma once

#include <cstdint>
#include <array>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddo/model/condition_image.hpp"
#include "qwen2_vl_image_processor.hpp"

namespace ddo::qwen_image_21 {

// The model card's limit: "up to 10 reference images".
inline constexpr std::size_t kMaxReferences = 10;

// calculate_dimensions(target_area, ratio): width = round(sqrt(area * ratio) / 32) * 32, height likewise from
// width / ratio, with Python's round (half to even).
std::pair<std::int64_t, std::int64_t> calculate_dimensions(double target_area, double ratio);

struct Reference {
    std::filesystem::path path;
    std::int64_t width = 0, height = 0;  // after the resize (multiples of 32)
    at::Tensor vae_pixels;               // [1, 4, 1, H, W] float32 in [-1, 1]
    text::VisionInput vision;            // the vision tower's patches and grid
    std::int64_t vision_tokens = 0;      // <|image_pad|> tokens it takes in the prompt (grid t*h*w / merge^2)
};

// Each image prepared for both encoders. UsageError (exit 2) naming the file for an image whose ratio leaves a side
// under 32 pixels at this output_resolution, and for one the image processor would resize again (its min/max
// pixels): the vision slots would then not cover the latents 2x2 as the transformer needs.
// processor_file: where `processor` was read (named in the error).
std::vector<Reference> prepare_references(const std::vector<model::ConditionImage> & images,
                                          std::int64_t output_resolution,
                                          const text::Qwen2VlImageProcessorConfig & processor,
                                          const std::filesystem::path & processor_file);

// The references as one call of the vision tower: their patches concatenated in order, with each one's grid and
// the <|image_pad|> tokens it takes in the prompt.
struct VisionBatch {
    at::Tensor pixel_values;
    std::vector<std::array<std::int64_t, 3>> grid_thw;
    std::vector<std::int64_t> tokens;
};
VisionBatch vision_batch(const std::vector<Reference> & refs);

// What the report records of one reference's preprocessing (inputs.image_<i>.preprocess).
nlohmann::json preprocess_record(const Reference & r, std::int64_t output_resolution);

}  // namespace ddo::qwen_image_21
