// Writes 8-bit RGBA PNG files (libpng).
#pragma once

#include <cstdint>
#include <filesystem>

namespace ddo::qwen_image_21 {

// rgba: height * width * 4 bytes, row-major. Throws RuntimeError naming the file on failure.
void write_png_rgba(const std::filesystem::path & path, const uint8_t * rgba, uint32_t width, uint32_t height);

}  // namespace ddo::qwen_image_21
