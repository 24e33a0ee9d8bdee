// An RGBA image flattened onto white as Pillow's paste-with-mask does it: what QwenImage21Pipeline's
// _get_qwen_prompt_embeds (diffusers pipelines/qwenimage21/pipeline_qwenimage21.py) hands the vision encoder for an
// RGBA condition image: `white = Image.new("RGB", size, (255, 255, 255)); white.paste(img, mask=img.getchannel("A"))`.
// A port of Pillow's src/libImaging/Paste.c (paste_mask_L) with ImagingUtils.h's BLEND / DIV255 integer rounding.
#pragma once

#include "ddo/media/image_resize.hpp"

namespace ddo::media {

// `rgba` (4 channels) composited over opaque white -> RGB (3 channels), byte for byte Pillow's
// out = DIV255(255 * (255 - a) + c * a) per colour channel. UsageError for an empty image or one that is not RGBA.
Image8 composite_over_white(const Image8 & rgba);

}  // namespace ddo::media
