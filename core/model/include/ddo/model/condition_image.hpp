// Condition images of a run (workload.images, --image FILE[@FRAME]): the request parsed, the file decoded by
// libddo_media's read_image, and the pixels as the tensor diffusers' VaeImageProcessor hands the VAE
// (image_processor.py: pil_to_numpy / 255, numpy_to_pt, normalize: 2x - 1). ModelRun::condition_images reads them
// and records them in the report. Note [Image input] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <ATen/core/Tensor.h>

#include "ddo/media/image_reader.hpp"
#include "ddo/media/image_resize.hpp"

namespace ddo::model {

struct ConditionImageRequest {
    std::filesystem::path path;
    std::int64_t frame = 0;  // the video frame it conditions (0: the first)
};

// "PATH[@FRAME]": FRAME is the digits after the last '@' (a path with an '@' and no frame stays whole).
// UsageError naming `where` for an empty path or a frame that does not fit.
ConditionImageRequest parse_condition_image(const std::string & spec, const std::string & where);

struct ConditionImage {
    std::filesystem::path path;  // as resolved (a preset's relative path is relative to the preset file)
    std::int64_t frame = 0;
    media::DecodedImage image;
};

// [1, C, H, W] float32 on the CPU in [-1, 1]: x / 255 (float32) * 2 - 1, channels first, as VaeImageProcessor
// normalises a PIL image. C = 3, or 4 when keep_alpha and the image has alpha (the processor keeps what the PIL
// image has; load_image's convert("RGB") drops alpha, so keep_alpha = false is the pipelines' case).
at::Tensor image_to_tensor(const media::Image8 & image, bool keep_alpha = false);
at::Tensor image_to_tensor(const media::DecodedImage & image, bool keep_alpha = false);

// The RGB pixels of a decoded image (alpha dropped, as PIL's convert("RGB")), for resize_like_pil and the H.264
// round trip.
media::Image8 rgb_of(const media::DecodedImage & image);

}  // namespace ddo::model
