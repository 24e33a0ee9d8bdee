// Image outputs of a model run: 8-bit PNG (libpng) of any channel count a model produces — 1 (gray), 2 (gray +
// alpha), 3 (RGB) or 4 (RGBA) — with text chunks that tie the file to its run (plugin, preset, report path,
// settings). Video and audio writers will sit beside this one under the same Outputs interface (model_run.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ddo::model {

using PngText = std::vector<std::pair<std::string, std::string>>;  // (keyword <= 79 Latin-1 chars, UTF-8 text)

// pixels: height * width * channels bytes, row-major, interleaved (borrowed). The PNG file's bytes. Throws
// UsageError for an unsupported channel count or an empty image.
std::vector<std::uint8_t> encode_png(const std::uint8_t * pixels, std::uint32_t width, std::uint32_t height, int channels,
                                     const PngText & text = {});

// encode_png written to `path` atomically (a temp file beside it, fsynced, renamed: a reader, a crash or a full disk
// never leaves a torn PNG under the name). Returns the bytes written. RuntimeError naming the file on failure.
std::vector<std::uint8_t> write_png(const std::filesystem::path & path, const std::uint8_t * pixels, std::uint32_t width,
                                    std::uint32_t height, int channels, const PngText & text = {});

// [C, H, W] floating values in [0, 1] -> [H, W, C] uint8 on the CPU, rounded as diffusers' numpy_to_pil
// ((x * 255).round()).
at::Tensor to_pixels_hwc(const at::Tensor & chw);

}  // namespace ddo::model
