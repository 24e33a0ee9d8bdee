// Reads an 8-bit PNG back (libpng): size, colour type, channels, interleaved pixels and text chunks. Tests only.
#pragma once

#include <png.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ddo::test {

struct Png {
    uint32_t width = 0, height = 0;
    int color_type = -1, channels = 0;
    std::vector<uint8_t> pixels;
    std::map<std::string, std::string> text;
};

namespace detail {

// Reads the PNG of `fp` (borrowed, open for reading) into `out`; false on a libpng error, which longjmps back to
// this frame. The FILE is closed by the caller, outside the setjmp frame: every call after setjmp may return to it,
// so a close here would be reached again on that path (-Wuse-after-free).
inline bool read_png_stream(std::FILE * fp, Png & out) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, nullptr);
        return false;
    }
    png_init_io(png, fp);
    png_read_info(png, info);
    out.width = png_get_image_width(png, info);
    out.height = png_get_image_height(png, info);
    out.color_type = png_get_color_type(png, info);
    out.channels = png_get_channels(png, info);
    const size_t row = png_get_rowbytes(png, info);
    out.pixels.resize(row * out.height);
    for (uint32_t y = 0; y < out.height; ++y) png_read_row(png, out.pixels.data() + y * row, nullptr);
    png_read_end(png, info);
    png_textp text = nullptr;
    int n = 0;
    png_get_text(png, info, &text, &n);
    for (int i = 0; i < n; ++i) out.text[text[i].key] = text[i].text;
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
}

}  // namespace detail

// The PNG at `path`; an empty Png (width 0, color_type -1) when it cannot be opened or read.
inline Png read_png(const std::filesystem::path & path) {
    std::FILE * fp = std::fopen(path.c_str(), "rb");
    if (!fp) return {};
    Png out;
    const bool ok = detail::read_png_stream(fp, out);
    std::fclose(fp);
    return ok ? out : Png{};
}

}  // namespace ddo::test
