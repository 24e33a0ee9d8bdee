#include "ddo/model/image_output.hpp"

#include <ATen/ATen.h>
#include <png.h>

#include <cstdio>
#include <memory>

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

struct FileCloser {
    void operator()(std::FILE * f) const noexcept { if (f) std::fclose(f); }
};

// png_create_write_struct/info as one RAII handle.
class PngWrite {
public:
    PngWrite() {
        png_ = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
        if (png_) info_ = png_create_info_struct(png_);
    }
    ~PngWrite() { png_destroy_write_struct(&png_, info_ ? &info_ : nullptr); }
    PngWrite(const PngWrite &) = delete;
    PngWrite & operator=(const PngWrite &) = delete;
    png_structp png() const { return png_; }
    png_infop info() const { return info_; }

private:
    png_structp png_ = nullptr;
    png_infop info_ = nullptr;
};

int color_type(int channels) {
    switch (channels) {
    case 1: return PNG_COLOR_TYPE_GRAY;
    case 2: return PNG_COLOR_TYPE_GRAY_ALPHA;
    case 3: return PNG_COLOR_TYPE_RGB;
    case 4: return PNG_COLOR_TYPE_RGBA;
    default: return -1;
    }
}

// Writes everything after the file is open; a libpng error longjmps back here, so no C++ object with a destructor
// lives in this frame.
bool write_all(png_structp png, png_infop info, std::FILE * fp, const std::uint8_t * pixels, std::uint32_t width,
               std::uint32_t height, int channels, png_text * text, int n_text) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_init_io(png, fp);
    png_set_IHDR(png, info, width, height, 8, color_type(channels), PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (n_text > 0) png_set_text(png, info, text, n_text);
    png_write_info(png, info);
    const std::size_t row = std::size_t(width) * std::size_t(channels);
    for (std::uint32_t y = 0; y < height; ++y) png_write_row(png, const_cast<png_bytep>(pixels + std::size_t(y) * row));
    png_write_end(png, nullptr);
    return true;
}

}  // namespace

void write_png(const std::filesystem::path & path, const std::uint8_t * pixels, std::uint32_t width,
               std::uint32_t height, int channels, const PngText & text) {
    if (color_type(channels) < 0)
        throw UsageError(path.string() + ": a PNG takes 1, 2, 3 or 4 channels; the model produced " +
                         std::to_string(channels));
    if (width == 0 || height == 0) throw UsageError(path.string() + ": an image of " + std::to_string(width) + "x" +
                                                    std::to_string(height) + " pixels cannot be written");
    std::vector<png_text> chunks;
    for (const auto & [k, v] : text) {
        png_text t{};
        t.compression = v.size() > 1024 ? PNG_ITXT_COMPRESSION_zTXt : PNG_ITXT_COMPRESSION_NONE;  // iTXt: UTF-8
        t.key = const_cast<char *>(k.c_str());
        t.text = const_cast<char *>(v.c_str());
        t.itxt_length = v.size();
        chunks.push_back(t);
    }
    std::unique_ptr<std::FILE, FileCloser> fp(std::fopen(path.c_str(), "wb"));
    if (!fp) throw RuntimeError(path.string() + ": cannot create the PNG file; check that the output directory is writable");
    PngWrite w;
    if (!w.png() || !w.info()) throw RuntimeError(path.string() + ": libpng could not start a PNG (out of memory?)");
    if (!write_all(w.png(), w.info(), fp.get(), pixels, width, height, channels, chunks.data(), int(chunks.size())))
        throw RuntimeError(path.string() + ": writing the PNG failed (disk full?)");
    if (std::fclose(fp.release()) != 0) throw RuntimeError(path.string() + ": closing the PNG failed (disk full?)");
}

at::Tensor to_pixels_hwc(const at::Tensor & chw) {
    if (chw.dim() != 3) throw UsageError("to_pixels_hwc: an image is [C, H, W]");
    return (chw.to(at::kCPU).to(at::kFloat) * 255).round().to(at::kByte).permute({1, 2, 0}).contiguous();
}

}  // namespace ddo::model
