// composite_over_white (image_composite.hpp): Pillow's paste of an RGBA image onto an RGB one with the alpha as an L
// mask. paste_mask_L blends every byte of the 32-bit pixel as BLEND(mask, out, in) = DIV255(out * (255 - mask) +
// in * mask), DIV255(a) = ((a + 128) >> 8 + (a + 128)) >> 8 (src/libImaging/Paste.c, ImagingUtils.h); the RGB
// image's fourth (padding) byte is dropped. qwen3_vl_text_parity_test checks all 256 x 256 (colour, alpha) pairs
// against the fixture venv's Pillow.
#include "ddo/media/image_composite.hpp"

#include <cstddef>
#include <string>

#include "ddo/error.hpp"

namespace ddo::media {

Image8 composite_over_white(const Image8 & rgba) {
    if (rgba.channels != 4)
        throw UsageError("composite_over_white: the image has " + std::to_string(rgba.channels) +
                         " channels; only RGBA (4) is composited over white");
    const std::size_t n = std::size_t(rgba.width) * std::size_t(rgba.height);
    if (rgba.width <= 0 || rgba.height <= 0 || rgba.pixels.size() != n * 4)
        throw UsageError("composite_over_white: empty image or pixel buffer of the wrong size");
    Image8 out{rgba.width, rgba.height, 3, std::vector<std::uint8_t>(n * 3)};
    for (std::size_t i = 0; i < n; ++i) {
        const unsigned a = rgba.pixels[i * 4 + 3];
        for (std::size_t c = 0; c < 3; ++c) {
            const unsigned t = 255u * (255u - a) + unsigned(rgba.pixels[i * 4 + c]) * a + 128u;
            out.pixels[i * 3 + c] = std::uint8_t(((t >> 8) + t) >> 8);
        }
    }
    return out;
}

}  // namespace ddo::media
