#include "png_writer.hpp"

#include <png.h>

#include <cstdio>
#include <vector>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {

void write_png_rgba(const std::filesystem::path & path, const uint8_t * rgba, uint32_t width, uint32_t height) {
    FILE * fp = std::fopen(path.c_str(), "wb");
    if (!fp) throw RuntimeError(path.string() + ": cannot create the PNG file; check the output directory");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        std::fclose(fp);
        throw RuntimeError(path.string() + ": writing the PNG failed (disk full?)");
    }
    png_init_io(png, fp);
    png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (uint32_t y = 0; y < height; ++y) png_write_row(png, const_cast<png_bytep>(rgba + size_t(y) * width * 4));
    png_write_end(png, nullptr);
    png_destroy_write_struct(&png, &info);
    if (std::fclose(fp) != 0) throw RuntimeError(path.string() + ": closing the PNG failed (disk full?)");
}

}  // namespace ddo::qwen_image_21
