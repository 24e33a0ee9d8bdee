#include "ddo/model/image_output.hpp"

#include <ATen/ATen.h>
#include <png.h>


#include "ddo/error.hpp"
#include "ddo/util/atomic_write.hpp"

namespace ddo::model {
namespace {

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

extern "C" void append_bytes(png_structp png, png_bytep data, png_size_t n) {
    auto * out = static_cast<std::vector<std::uint8_t> *>(png_get_io_ptr(png));
    out->insert(out->end(), data, data + n);
}
extern "C" void flush_nothing(png_structp) {}

// Encodes into `out`; a libpng error longjmps back here, so no C++ object with a destructor lives in this frame.
bool encode_all(png_structp png, png_infop info, std::vector<std::uint8_t> * out, const std::uint8_t * pixels,
                std::uint32_t width, std::uint32_t height, int channels, png_text * text, int n_text) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_set_write_fn(png, out, append_bytes, flush_nothing);
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

std::vector<std::uint8_t> encode_png(const std::uint8_t * pixels, std::uint32_t width, std::uint32_t height, int channels,
                                     const PngText & text) {
    if (color_type(channels) < 0)
        throw UsageError("a PNG takes 1, 2, 3 or 4 channels; the model produced " + std::to_string(channels));
    if (width == 0 || height == 0)
        throw UsageError("an image of " + std::to_string(width) + "x" + std::to_string(height) + " pixels cannot be written");
    std::vector<png_text> chunks;
    for (const auto & [k, v] : text) {
        png_text t{};
        t.compression = v.size() > 1024 ? PNG_ITXT_COMPRESSION_zTXt : PNG_ITXT_COMPRESSION_NONE;  // iTXt: UTF-8
        t.key = const_cast<char *>(k.c_str());
        t.text = const_cast<char *>(v.c_str());
        t.itxt_length = v.size();
        chunks.push_back(t);
    }
    PngWrite w;
    if (!w.png() || !w.info()) throw RuntimeError("libpng could not start a PNG (out of memory?)");
    std::vector<std::uint8_t> out;
    out.reserve(std::size_t(width) * height * std::size_t(channels) / 2 + 1024);
    if (!encode_all(w.png(), w.info(), &out, pixels, width, height, channels, chunks.data(), int(chunks.size())))
        throw RuntimeError("encoding the PNG failed (libpng error)");
    return out;
}

std::vector<std::uint8_t> write_png(const std::filesystem::path & path, const std::uint8_t * pixels, std::uint32_t width,
                                    std::uint32_t height, int channels, const PngText & text) {
    std::vector<std::uint8_t> bytes;
    try {
        bytes = encode_png(pixels, width, height, channels, text);
    } catch (const Error & e) {
        throw RuntimeError(path.string() + ": " + e.what());
    }
    write_text_atomically(path, std::string(bytes.begin(), bytes.end()), "output");
    return bytes;
}

at::Tensor to_pixels_hwc(const at::Tensor & chw) {
    if (chw.dim() != 3) throw UsageError("to_pixels_hwc: an image is [C, H, W]");
    return (chw.to(at::kCPU).to(at::kFloat) * 255).round().to(at::kByte).permute({1, 2, 0}).contiguous();
}

}  // namespace ddo::model
