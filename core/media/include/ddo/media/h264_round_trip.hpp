// The H.264 CRF round trip of a condition frame: the frame is compressed as one libx264 frame and decoded back, so
// that the condition looks like the compressed video the model was trained on. A port of diffusers 0.42.1
// apply_image_conditioning_crf (diffusers/pipelines/ltx2/utils.py; itself ltx-pipelines media_io.preprocess) with
// the conversions PyAV makes there: VideoFrame.from_ndarray(rgb24).reformat(format="yuv420p") and
// frame.to_ndarray(format="rgb24") are libswscale with SWS_BILINEAR, the default (BT.601) coefficients and MPEG
// (limited) range on both sides, and no other flags. Note [H.264 round trip] in docs/architecture.md.
#pragma once

#include "ddo/media/image_resize.hpp"

namespace ddo::media {

// `rgb` (channels 3) after the round trip at `crf` (0..51): crf 0 returns it unchanged (the reference skips the
// round trip); otherwise the frame is cropped to an even width and height (the last odd row/column dropped, as the
// reference's image[:h // 2 * 2, :w // 2 * 2]), converted rgb24 -> yuv420p, encoded by libx264 (preset veryfast,
// crf, one frame, rate 1), decoded by FFmpeg's h264 decoder and converted back to rgb24. UsageError for a crf out
// of range, a frame that is not RGB or smaller than 2x2.
Image8 h264_round_trip(const Image8 & rgb, int crf);

}  // namespace ddo::media
