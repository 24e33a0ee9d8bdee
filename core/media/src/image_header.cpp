// parse_image_header (image_header.hpp): PNG chunks, JPEG markers and WebP RIFF chunks walked with every read bounds
// checked; nothing here allocates by the image's size.
#include "image_header.hpp"

#include <algorithm>
#include <cstring>

#include "ddo/error.hpp"

namespace ddo::media::detail {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint32_t be32(const std::uint8_t * p) { return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3]; }
std::uint16_t be16(const std::uint8_t * p) { return std::uint16_t(p[0] << 8 | p[1]); }
std::uint32_t le32(const std::uint8_t * p) { return std::uint32_t(p[3]) << 24 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[1]) << 8 | p[0]; }
std::uint32_t le24(const std::uint8_t * p) { return std::uint32_t(p[2]) << 16 | std::uint32_t(p[1]) << 8 | p[0]; }

bool starts_with(const Bytes & b, std::size_t at, const char * magic, std::size_t n) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

[[noreturn]] void damaged(const std::string & describe, const std::string & what) {
    throw UsageError(describe + ": " + what + "; the file is damaged: re-export it as PNG, JPEG or WebP");
}

ImageHeader parse_png(const Bytes & b, const std::string & describe) {
    ImageHeader h;
    h.format = "png";
    std::size_t at = 8;
    bool ihdr = false, idat = false;
    for (;;) {
        if (at + 8 > b.size()) { h.truncated = true; break; }
        const std::uint32_t len = be32(&b[at]);
        const char * type = reinterpret_cast<const char *>(&b[at + 4]);
        if (len > 0x7fffffffu) damaged(describe, "a PNG chunk length over 2^31");
        const std::size_t data = at + 8, end = data + len + 4;  // + CRC
        if (end > b.size()) { h.truncated = true; break; }
        if (!ihdr) {
            if (std::memcmp(type, "IHDR", 4) != 0 || len < 13) damaged(describe, "the PNG does not begin with IHDR");
            ihdr = true;
            h.width = be32(&b[data]);
            h.height = be32(&b[data + 4]);
            h.bit_depth = b[data + 8];
            switch (b[data + 9]) {
            case 0: h.source_color = "gray", h.source_channels = 1; break;
            case 2: h.source_color = "rgb", h.source_channels = 3; break;
            case 3: h.source_color = "palette", h.source_channels = 1; break;
            case 4: h.source_color = "gray+alpha", h.source_channels = 2, h.has_alpha = true; break;
            case 6: h.source_color = "rgba", h.source_channels = 4, h.has_alpha = true; break;
            default: damaged(describe, "PNG colour type " + std::to_string(b[data + 9]) + " does not exist");
            }
        } else if (std::memcmp(type, "tRNS", 4) == 0) {
            h.has_alpha = true;
        } else if (std::memcmp(type, "acTL", 4) == 0 && len >= 8) {
            if (be32(&b[data]) > 1) h.animated = true;  // num_frames
        } else if (std::memcmp(type, "eXIf", 4) == 0) {
            h.orientation = exif_orientation(&b[data], len);
        } else if (std::memcmp(type, "IDAT", 4) == 0) {
            idat = true;
        } else if (std::memcmp(type, "IEND", 4) == 0) {
            break;
        }
        at = end;
    }
    if (!ihdr) damaged(describe, "the PNG ends before its IHDR header");
    if (!idat) h.truncated = true;
    return h;
}

ImageHeader parse_jpeg(const Bytes & b, const std::string & describe) {
    ImageHeader h;
    h.format = "jpeg";
    bool sof = false, exif_seen = false;
    std::size_t at = 2;
    for (;;) {
        while (at < b.size() && b[at] == 0xff && at + 1 < b.size() && b[at + 1] == 0xff) ++at;  // fill bytes
        if (at + 4 > b.size()) { h.truncated = true; return h; }
        if (b[at] != 0xff) damaged(describe, "a JPEG marker was expected at byte " + std::to_string(at));
        const std::uint8_t m = b[at + 1];
        if (m == 0xd8 || (m >= 0xd0 && m <= 0xd7) || m == 0x01) { at += 2; continue; }  // no length
        const std::size_t len = be16(&b[at + 2]);
        if (len < 2) damaged(describe, "a JPEG segment of length " + std::to_string(len));
        const std::size_t data = at + 4, end = at + 2 + len;
        if (end > b.size()) { h.truncated = true; return h; }
        const bool is_sof = m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
        if (is_sof && !sof) {
            if (len < 8) damaged(describe, "a JPEG frame header (SOF) of length " + std::to_string(len));
            sof = true;
            h.bit_depth = b[data];
            h.height = be16(&b[data + 1]);
            h.width = be16(&b[data + 3]);
            h.source_channels = b[data + 5];
            h.source_color = h.source_channels == 1 ? "gray" : h.source_channels == 4 ? "cmyk" : "ycbcr";
        } else if (m == 0xe1 && !exif_seen && len >= 8 && std::memcmp(&b[data], "Exif\0\0", 6) == 0) {
            exif_seen = true;  // PIL reads the first Exif APP1
            h.orientation = exif_orientation(&b[data + 6], len - 8);
        } else if (m == 0xda) {  // start of scan: the entropy-coded data follows; the file must end with EOI
            if (!sof) damaged(describe, "the JPEG has no frame header (SOF) before its scan");
            // Entropy-coded data stuffs every 0xff (ff 00), so the first ff d9 after the scan header is the EOI;
            // trailers some cameras append after it (and MPO's second image) do not make the file truncated.
            bool eoi = false;
            for (std::size_t i = end; i + 1 < b.size() && !eoi; ++i) eoi = b[i] == 0xff && b[i + 1] == 0xd9;
            h.truncated = !eoi;
            return h;
        } else if (m == 0xd9) {
            h.truncated = true;  // EOI before any scan
            return h;
        }
        at = end;
    }
}

ImageHeader parse_webp(const Bytes & b, const std::string & describe) {
    ImageHeader h;
    h.format = "webp";
    h.source_color = "rgb";
    h.source_channels = 3;
    const std::uint64_t riff_end = 8 + std::uint64_t(le32(&b[4]));
    if (riff_end > b.size()) h.truncated = true;
    const std::size_t limit = std::size_t(std::min<std::uint64_t>(riff_end, b.size()));
    std::size_t at = 12;
    bool sized = false, image_data = false;
    while (at + 8 <= limit) {
        const char * type = reinterpret_cast<const char *>(&b[at]);
        const std::size_t len = le32(&b[at + 4]);
        const std::size_t data = at + 8;
        if (data + len > limit) { h.truncated = true; break; }
        if (std::memcmp(type, "VP8X", 4) == 0 && len >= 10) {
            const std::uint8_t flags = b[data];
            if (flags & 0x10) h.has_alpha = true;
            if (flags & 0x02) h.animated = true;
            h.width = std::int64_t(le24(&b[data + 4])) + 1;
            h.height = std::int64_t(le24(&b[data + 7])) + 1;
            sized = true;
        } else if (std::memcmp(type, "ANIM", 4) == 0 || std::memcmp(type, "ANMF", 4) == 0) {
            h.animated = true;
        } else if (std::memcmp(type, "ALPH", 4) == 0) {
            h.has_alpha = true;
        } else if (std::memcmp(type, "EXIF", 4) == 0) {
            h.orientation = exif_orientation(&b[data], len);
        } else if (std::memcmp(type, "VP8 ", 4) == 0) {
            image_data = true;
            if (len < 10 || b[data + 3] != 0x9d || b[data + 4] != 0x01 || b[data + 5] != 0x2a)
                damaged(describe, "the WebP VP8 frame header is not valid");
            if (!sized) {
                h.width = (b[data + 6] | b[data + 7] << 8) & 0x3fff;
                h.height = (b[data + 8] | b[data + 9] << 8) & 0x3fff;
                sized = true;
            }
        } else if (std::memcmp(type, "VP8L", 4) == 0) {
            image_data = true;
            if (len < 5 || b[data] != 0x2f) damaged(describe, "the WebP VP8L header is not valid");
            const std::uint32_t bits = le32(&b[data + 1]);
            if (!sized) {
                h.width = std::int64_t(bits & 0x3fff) + 1;
                h.height = std::int64_t((bits >> 14) & 0x3fff) + 1;
                sized = true;
            }
            if (bits >> 28 & 1) h.has_alpha = true;
        }
        at = data + len + (len & 1);  // chunks are padded to an even size
    }
    if (!sized || !image_data) {
        if (!h.animated) h.truncated = true;
    }
    if (h.has_alpha) h.source_color = "rgba", h.source_channels = 4;
    return h;
}

}  // namespace

int exif_orientation(const std::uint8_t * p, std::size_t n) {
    if (n >= 6 && std::memcmp(p, "Exif\0\0", 6) == 0) p += 6, n -= 6;
    if (n < 8) return 1;
    bool le;
    if (p[0] == 'I' && p[1] == 'I' && p[2] == 42 && p[3] == 0) le = true;
    else if (p[0] == 'M' && p[1] == 'M' && p[2] == 0 && p[3] == 42) le = false;
    else return 1;
    auto u16 = [&](std::size_t at) { return le ? std::uint16_t(p[at] | p[at + 1] << 8) : be16(p + at); };
    auto u32 = [&](std::size_t at) { return le ? le32(p + at) : be32(p + at); };
    const std::size_t ifd = u32(4);
    if (ifd + 2 > n) return 1;
    const std::size_t count = u16(ifd);
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t e = ifd + 2 + 12 * i;
        if (e + 12 > n) return 1;
        if (u16(e) != 0x0112) continue;
        const std::uint16_t type = u16(e + 2);
        const int v = type == 3 ? u16(e + 8) : type == 4 ? int(u32(e + 8)) : 1;  // SHORT (the standard) or LONG
        return v >= 1 && v <= 8 ? v : 1;
    }
    return 1;
}

ImageHeader parse_image_header(const Bytes & b, const std::string & describe) {
    static const char kPng[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
    if (starts_with(b, 0, kPng, 8)) return parse_png(b, describe);
    if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return parse_jpeg(b, describe);
    if (starts_with(b, 0, "RIFF", 4) && starts_with(b, 8, "WEBP", 4)) return parse_webp(b, describe);
    const std::string next = "; give a PNG, JPEG or WebP still image";
    if (starts_with(b, 0, "GIF87a", 6) || starts_with(b, 0, "GIF89a", 6))
        throw UsageError(describe + ": a GIF is not read as a condition image" + next + " (convert it: one frame as PNG)");
    if (starts_with(b, 4, "ftyp", 4) || starts_with(b, 0, "\x1a\x45\xdf\xa3", 4) ||
        (starts_with(b, 0, "RIFF", 4) && starts_with(b, 8, "AVI ", 4)))
        throw UsageError(describe + ": this is a video file; condition images are stills: extract the frame as PNG "
                                    "(ffmpeg -i VIDEO -frames:v 1 frame.png), and give keyframes at other frames as "
                                    "--image FILE@FRAME");
    if (b.empty()) throw UsageError(describe + ": the file is empty" + next);
    throw UsageError(describe + ": not an image (no PNG, JPEG or WebP signature)" + next);
}

}  // namespace ddo::media::detail
