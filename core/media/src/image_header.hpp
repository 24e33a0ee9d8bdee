// Internal to libddo_media: the facts read_image needs from an image file's own header before anything is decoded
// (size, depth, colour layout, animation, EXIF orientation, completeness), parsed by ddo from the bytes.
// References: PNG (ISO/IEC 15948, W3C PNG 3rd edition: IHDR, tRNS, acTL, eXIf), JPEG (ITU-T T.81 B.1: markers, SOFn;
// JFIF/Exif APP1), WebP (RFC 9649: RIFF, VP8, VP8L, VP8X, ANIM, EXIF), Exif 2.32 (TIFF IFD0 tag 0x0112).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddo::media::detail {

struct ImageHeader {
    std::string format;         // "png" | "jpeg" | "webp"
    std::int64_t width = 0, height = 0;
    int bit_depth = 8;
    int source_channels = 0;
    std::string source_color;   // "gray" | "gray+alpha" | "rgb" | "rgba" | "palette" | "ycbcr" | "cmyk"
    bool has_alpha = false;     // alpha channel, or a tRNS chunk (PNG), or the WebP alpha flag
    bool animated = false;      // APNG acTL with more than one frame, WebP ANIM/ANMF
    bool truncated = false;     // the data ends before the format's end (PNG IEND, JPEG EOI, the RIFF size)
    int orientation = 1;        // EXIF 0x0112 (1 when absent)
};

// The header of `bytes` (the whole file). Throws UsageError naming `describe` for a file that is none of the three
// formats (a video or GIF recognised by its signature is named) or whose header is damaged.
ImageHeader parse_image_header(const std::vector<std::uint8_t> & bytes, const std::string & describe);

// Orientation from an Exif TIFF block ("II*\0" or "MM\0*" first; a leading "Exif\0\0" is skipped); 1 when absent
// or unreadable.
int exif_orientation(const std::uint8_t * data, std::size_t size);

}  // namespace ddo::media::detail
