// The Qwen2-VL image processor (what Qwen3-VL's processor runs on a condition image before the vision tower):
// smart_resize to multiples of patch_size * merge_size within [min_pixels, max_pixels], Pillow's resize, rescale and
// normalize in float32, and the patchify that flattens each patch with the frame duplicated over temporal_patch_size.
// Reference: transformers 5.24 models/qwen2_vl/image_processing_pil_qwen2_vl.py (smart_resize,
// Qwen2VLImageProcessorPil._preprocess / resize / patchify) and image_transforms.py (rescale, normalize).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <utility>

#include <ATen/core/Tensor.h>

#include "ddo/media/image_resize.hpp"

namespace ddo::text {

struct Qwen2VlImageProcessorConfig {
    // Qwen2VLImageProcessorPil's class defaults, which a key missing from the file keeps.
    std::int64_t patch_size = 14, temporal_patch_size = 2, merge_size = 2;
    std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};  // OPENAI_CLIP_MEAN
    std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};  // OPENAI_CLIP_STD
    double rescale_factor = 1.0 / 255.0;
    bool do_resize = true, do_rescale = true, do_normalize = true, do_convert_rgb = true;
    media::ResampleFilter resample = media::ResampleFilter::bicubic;
    std::int64_t min_pixels = 56 * 56, max_pixels = 28 * 28 * 1280;  // size.shortest_edge / size.longest_edge

    // processor/preprocessor_config.json as Qwen2VLImageProcessorPil.save_pretrained writes it (transformers 5:
    // size {shortest_edge, longest_edge}; min_pixels / max_pixels, which older files carry, override them as the
    // processor's __init__ does). UsageError naming the file and key for a value ddo does not implement (a resample
    // that is not one of PIL's filters, a mean/std that is not 3 numbers or a scalar, sizes below one).
    static Qwen2VlImageProcessorConfig from_file(const std::filesystem::path & preprocessor_config_json);
};

// transformers' smart_resize: (height, width) rounded to multiples of `factor` (Python's round: half to even), then
// scaled down (floor) above max_pixels or up (ceil) below min_pixels. UsageError for an aspect ratio above 200 (the
// reference's ValueError) or a size below one.
std::pair<std::int64_t, std::int64_t> smart_resize(std::int64_t height, std::int64_t width, std::int64_t factor,
                                                   std::int64_t min_pixels, std::int64_t max_pixels);

struct VisionInput {
    at::Tensor pixel_values;                  // [grid_h * grid_w, 3 * T * P * P] float32, the processor's patch order
    std::array<std::int64_t, 3> grid_thw{};   // {1, grid_h, grid_w} in patches
};

// One RGB image (3 channels; an RGBA one goes through media::composite_over_white first, as the pipeline does) ->
// Qwen2VLImageProcessorPil(images=[rgb]).pixel_values / image_grid_thw[0], bit for bit: Pillow's resize with
// `resample` when smart_resize changes the size, x * rescale_factor in double cast to float32, (x - mean) / std in
// float32, patches ordered (grid_h / m, grid_w / m, m, m) each flattened (C, T, P, P). UsageError for an image that is
// not RGB, or (do_resize false) whose size is not a multiple of patch_size * merge_size.
VisionInput preprocess_image(const media::Image8 & rgb, const Qwen2VlImageProcessorConfig & config);

}  // namespace ddo::text
