// A still image read as a condition input (--image FILE, workload.images): PNG, JPEG or WebP decoded by libavcodec,
// turned into interleaved 8-bit RGB or RGBA with the EXIF orientation applied, as diffusers' load_image
// (diffusers/utils/loading_utils.py: PIL.Image.open, ImageOps.exif_transpose) sees the file. The container header
// is read by ddo itself first, so that the size is checked against ImageLimits before any pixel is decoded, and a
// video, an animation, a truncated file or a file that is no image is refused (UsageError naming the file and the
// next step). Note [Image input] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ddo::media {

// Sizes refused before decoding (the pixels of a 100000x100000 header are never allocated).
struct ImageLimits {
    std::int64_t max_width = 16384;
    std::int64_t max_height = 16384;
    std::int64_t max_pixels = std::int64_t(8192) * 8192;  // 64 Mpx: 192 MiB as RGB, 768 MiB as float
    std::int64_t max_file_bytes = std::int64_t(1) << 30;  // the file is read whole before its header is parsed
};

struct DecodedImage {
    int width = 0, height = 0;           // after the orientation
    int channels = 0;                    // 3 (RGB) or 4 (RGBA: the source had alpha)
    std::vector<std::uint8_t> pixels;    // [height, width, channels], row-major, 8 bits per sample
    bool has_alpha = false;              // the source carried alpha (an alpha channel, a palette with tRNS alpha)
    std::string format;                  // "png" | "jpeg" | "webp"
    int source_width = 0, source_height = 0;  // as stored, before the orientation
    int bit_depth = 8;                   // bits per sample as stored (PNG 1..16, JPEG 8/12, WebP 8)
    int source_channels = 0;             // samples per pixel as stored: 1 gray or palette index, 2, 3, 4
    std::string source_color;            // "gray" | "gray+alpha" | "rgb" | "rgba" | "palette" | "ycbcr"
    int orientation = 1;                 // the EXIF orientation applied (1..8; 1: none)
};

// Reads and decodes `path`. 16-bit samples keep their most significant byte (PIL for RGB/RGBA/LA; PIL's 16-bit gray
// "I;16" -> RGB clips at 255 instead, which ddo does not copy). UsageError naming the file for: a missing or
// unreadable file, a file that is no PNG/JPEG/WebP (a video or GIF says so), more than one frame (condition images
// are stills; keyframes at other frames are --image FILE@FRAME), a truncated or corrupt file, a size of 0, a size
// over `limits` (naming the size and the limit).
DecodedImage read_image(const std::filesystem::path & path, const ImageLimits & limits = {});

// PIL's ImageOps.exif_transpose on interleaved pixels: orientation 2..8 flips/rotates (5..8 swap width and height);
// 1 or any other value leaves the image as it is.
void apply_exif_orientation(DecodedImage & image, int orientation);

}  // namespace ddo::media
