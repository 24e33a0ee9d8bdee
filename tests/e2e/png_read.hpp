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

inline Png read_png(const std::filesystem::path & path) {
    Png out;
    std::FILE * fp = std::fopen(path.c_str(), "rb");
    if (!fp) return out;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, nullptr);
        std::fclose(fp);
        return Png{};
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
    std::fclose(fp);
    return out;
}

}  // namespace ddo::test
