#include "qwen2_vl_image_processor.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::text {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::filesystem::path & f, const std::string & key, const std::string & what) {
    throw UsageError(f.string() + ": " + key + " " + what +
                     "; expected the preprocessor_config.json that Qwen2VLImageProcessor(Pil).save_pretrained writes");
}

std::int64_t positive_int(const json & j, const std::filesystem::path & f, const std::string & key) {
    if (!j.is_number_integer() || j.get<std::int64_t>() < 1) bad(f, key, "must be a positive integer");
    return j.get<std::int64_t>();
}

bool boolean(const json & j, const std::filesystem::path & f, const std::string & key) {
    if (!j.is_boolean()) bad(f, key, "must be true or false");
    return j.get<bool>();
}

std::array<double, 3> three(const json & j, const std::filesystem::path & f, const std::string & key) {
    if (j.is_number()) return {j.get<double>(), j.get<double>(), j.get<double>()};
    if (!j.is_array() || j.size() != 3 || !j[0].is_number() || !j[1].is_number() || !j[2].is_number())
        bad(f, key, "must be one number or three (one per RGB channel)");
    return {j[0].get<double>(), j[1].get<double>(), j[2].get<double>()};
}

// PIL.Image.Resampling's values, as save_pretrained writes `resample`.
media::ResampleFilter pil_filter(const json & j, const std::filesystem::path & f) {
    using F = media::ResampleFilter;
    if (j.is_number_integer()) switch (j.get<int>()) {
            case 0: return F::nearest;
            case 1: return F::lanczos;
            case 2: return F::bilinear;
            case 3: return F::bicubic;
            case 4: return F::box;
            case 5: return F::hamming;
            default: break;
        }
    bad(f, "resample", "is " + j.dump() + ", not one of PIL's filters (0 nearest, 1 lanczos, 2 bilinear, 3 bicubic, "
                                          "4 box, 5 hamming)");
}

}  // namespace

Qwen2VlImageProcessorConfig Qwen2VlImageProcessorConfig::from_file(const std::filesystem::path & f) {
    std::ifstream in(f);
    if (!in) throw UsageError(f.string() + ": cannot read the image processor's config; the checkpoint's processor/ "
                              "folder must hold the preprocessor_config.json save_pretrained wrote");
    json j;
    try {
        j = json::parse(in);
    } catch (const std::exception & e) {
        throw UsageError(f.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) bad(f, "(top level)", "must be an object");
    Qwen2VlImageProcessorConfig c;
    if (j.contains("image_processor_type")) {
        const auto t = j.at("image_processor_type").is_string() ? j.at("image_processor_type").get<std::string>() : "";
        if (t.rfind("Qwen2VLImageProcessor", 0) != 0)
            bad(f, "image_processor_type", "is " + j.at("image_processor_type").dump() +
                                               " (only the Qwen2-VL image processor is implemented)");
    }
    if (j.contains("patch_size")) c.patch_size = positive_int(j.at("patch_size"), f, "patch_size");
    if (j.contains("temporal_patch_size"))
        c.temporal_patch_size = positive_int(j.at("temporal_patch_size"), f, "temporal_patch_size");
    if (j.contains("merge_size")) c.merge_size = positive_int(j.at("merge_size"), f, "merge_size");
    if (j.contains("image_mean")) c.image_mean = three(j.at("image_mean"), f, "image_mean");
    if (j.contains("image_std")) c.image_std = three(j.at("image_std"), f, "image_std");
    for (double s : c.image_std)
        if (s == 0.0) bad(f, "image_std", "has a zero");
    if (j.contains("rescale_factor")) {
        if (!j.at("rescale_factor").is_number()) bad(f, "rescale_factor", "must be a number");
        c.rescale_factor = j.at("rescale_factor").get<double>();
    }
    if (j.contains("do_resize")) c.do_resize = boolean(j.at("do_resize"), f, "do_resize");
    if (j.contains("do_rescale")) c.do_rescale = boolean(j.at("do_rescale"), f, "do_rescale");
    if (j.contains("do_normalize")) c.do_normalize = boolean(j.at("do_normalize"), f, "do_normalize");
    if (j.contains("do_convert_rgb")) c.do_convert_rgb = boolean(j.at("do_convert_rgb"), f, "do_convert_rgb");
    if (j.contains("resample")) c.resample = pil_filter(j.at("resample"), f);
    if (j.contains("size") && !j.at("size").is_null()) {
        const json & s = j.at("size");
        if (!s.is_object() || !s.contains("shortest_edge") || !s.contains("longest_edge"))
            bad(f, "size", "must hold shortest_edge and longest_edge (the pixel bounds smart_resize keeps to)");
        c.min_pixels = positive_int(s.at("shortest_edge"), f, "size.shortest_edge");
        c.max_pixels = positive_int(s.at("longest_edge"), f, "size.longest_edge");
    }
    // Qwen2VLImageProcessorPil.__init__: min_pixels / max_pixels replace the size bounds.
    if (j.contains("min_pixels") && !j.at("min_pixels").is_null())
        c.min_pixels = positive_int(j.at("min_pixels"), f, "min_pixels");
    if (j.contains("max_pixels") && !j.at("max_pixels").is_null())
        c.max_pixels = positive_int(j.at("max_pixels"), f, "max_pixels");
    return c;
}

std::pair<std::int64_t, std::int64_t> smart_resize(std::int64_t height, std::int64_t width, std::int64_t factor,
                                                   std::int64_t min_pixels, std::int64_t max_pixels) {
    if (height < 1 || width < 1 || factor < 1)
        throw UsageError("smart_resize: the image is " + std::to_string(width) + "x" + std::to_string(height) +
                         "; it needs at least one pixel");
    const double h = double(height), w = double(width), f = double(factor);
    if (std::max(h, w) / std::min(h, w) > 200)
        throw UsageError("the image is " + std::to_string(width) + "x" + std::to_string(height) +
                         ": its aspect ratio must be at most 200 (Qwen2-VL's smart_resize)");
    // Python's round() on a float: half to even, which nearbyint gives in the default rounding mode.
    auto h_bar = std::int64_t(std::nearbyint(h / f)) * factor;
    auto w_bar = std::int64_t(std::nearbyint(w / f)) * factor;
    if (h_bar * w_bar > max_pixels) {
        const double beta = std::sqrt((h * w) / double(max_pixels));
        h_bar = std::max(factor, std::int64_t(std::floor(h / beta / f)) * factor);
        w_bar = std::max(factor, std::int64_t(std::floor(w / beta / f)) * factor);
    } else if (h_bar * w_bar < min_pixels) {
        const double beta = std::sqrt(double(min_pixels) / (h * w));
        h_bar = std::int64_t(std::ceil(h * beta / f)) * factor;
        w_bar = std::int64_t(std::ceil(w * beta / f)) * factor;
    }
    return {h_bar, w_bar};
}

VisionInput preprocess_image(const media::Image8 & rgb, const Qwen2VlImageProcessorConfig & c) {
    if (rgb.channels != 3)
        throw UsageError("Qwen2-VL image processor: the image has " + std::to_string(rgb.channels) +
                         " channels; give RGB (an RGBA image is composited over white first, as the pipeline does)");
    if (rgb.width < 1 || rgb.height < 1 || rgb.pixels.size() != std::size_t(rgb.width) * std::size_t(rgb.height) * 3)
        throw UsageError("Qwen2-VL image processor: empty image or pixel buffer of the wrong size");
    const std::int64_t P = c.patch_size, M = c.merge_size, T = c.temporal_patch_size, factor = P * M;
    media::Image8 img = rgb;
    if (c.do_resize) {
        const auto [h, w] = smart_resize(rgb.height, rgb.width, factor, c.min_pixels, c.max_pixels);
        if (h != rgb.height || w != rgb.width) img = media::resize_like_pil(rgb, int(w), int(h), c.resample);
    } else if (img.height % factor != 0 || img.width % factor != 0) {
        throw UsageError("Qwen2-VL image processor: do_resize is false and the image is " + std::to_string(img.width) +
                         "x" + std::to_string(img.height) + ", not a multiple of patch_size * merge_size = " +
                         std::to_string(factor) + " on both sides");
    }
    const std::int64_t H = img.height, W = img.width, C = 3;
    // rescale: x.astype(float64) * scale, then float32; normalize: (x - mean) / std with mean and std as float32
    // (image_transforms.rescale / normalize). Either step skipped reads the previous value in float32.
    auto chw = at::empty({C, H, W}, at::kFloat);
    float * out = chw.data_ptr<float>();
    float mean[3], stdv[3];
    for (int k = 0; k < 3; ++k) {
        mean[k] = float(c.image_mean[std::size_t(k)]);
        stdv[k] = float(c.image_std[std::size_t(k)]);
    }
    for (std::int64_t y = 0; y < H; ++y)
        for (std::int64_t x = 0; x < W; ++x)
            for (std::int64_t k = 0; k < C; ++k) {
                const std::uint8_t v = img.pixels[std::size_t((y * W + x) * C + k)];
                float r = c.do_rescale ? float(double(v) * c.rescale_factor) : float(v);
                if (c.do_normalize) r = (r - mean[k]) / stdv[k];
                out[(k * H + y) * W + x] = r;
            }
    // patchify: [C, gh/m, m, P, gw/m, m, P] -> (gh/m, gw/m, m, m, C, P, P), the frame repeated over T after C.
    const std::int64_t gh = H / P, gw = W / P;
    auto p = chw.view({C, gh / M, M, P, gw / M, M, P}).permute({1, 4, 2, 5, 0, 3, 6}).unsqueeze(5);
    p = p.expand({gh / M, gw / M, M, M, C, T, P, P});
    return {p.reshape({gh * gw, C * T * P * P}).contiguous(), {1, gh, gw}};
}

}  // namespace ddo::text
