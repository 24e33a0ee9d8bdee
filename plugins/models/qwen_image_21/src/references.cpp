#include "references.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "ddo/error.hpp"
#include "ddo/media/image_composite.hpp"
#include "ddo/media/image_resize.hpp"

namespace ddo::qwen_image_21 {
namespace {

// PIL's convert("RGBA"): RGB gets an opaque alpha; RGBA stays as it is.
media::Image8 rgba_of(const media::DecodedImage & im) {
    media::Image8 out;
    out.width = im.width, out.height = im.height, out.channels = 4;
    if (im.channels == 4) {
        out.pixels = im.pixels;
        return out;
    }
    out.pixels.resize(std::size_t(im.width) * std::size_t(im.height) * 4);
    for (std::size_t p = 0, q = 0; q < out.pixels.size(); p += std::size_t(im.channels), q += 4) {
        for (std::size_t k = 0; k < 3; ++k) out.pixels[q + k] = im.pixels[p + k];
        out.pixels[q + 3] = 255;
    }
    return out;
}

}  // namespace

std::pair<std::int64_t, std::int64_t> calculate_dimensions(double target_area, double ratio) {
    const double width = std::sqrt(target_area * ratio);
    const double height = width / ratio;
    // Python's round() on a float is round-half-to-even, which is nearbyint in the default rounding mode.
    return {std::int64_t(std::nearbyint(width / 32.0)) * 32, std::int64_t(std::nearbyint(height / 32.0)) * 32};
}

std::vector<Reference> prepare_references(const std::vector<model::ConditionImage> & images,
                                          std::int64_t output_resolution,
                                          const text::Qwen2VlImageProcessorConfig & processor,
                                          const std::filesystem::path & processor_file) {
    std::vector<Reference> refs;
    const double area = double(output_resolution) * double(output_resolution);
    for (const auto & c : images) {
        const auto & im = c.image;
        const auto [w, h] = calculate_dimensions(area, double(im.width) / double(im.height));
        if (w < 32 || h < 32)
            throw UsageError("--image " + c.path.string() + ": " + std::to_string(im.width) + "x" +
                             std::to_string(im.height) + " resizes to " + std::to_string(w) + "x" + std::to_string(h) +
                             " at output_resolution " + std::to_string(output_resolution) + " (each side must be at "
                             "least 32 pixels); crop it to a less extreme aspect ratio or raise "
                             "plugin.qwen_image_21.output_resolution");
        Reference r;
        r.path = c.path;
        r.width = w, r.height = h;
        // One Lanczos resize of the RGBA image feeds both copies (VaeImageProcessor.resize and .preprocess resize
        // the same PIL image to the same size with the same filter).
        const auto resized = media::resize_like_pil(rgba_of(im), int(w), int(h), media::ResampleFilter::lanczos);
        r.vae_pixels = model::image_to_tensor(resized, /*keep_alpha=*/true).unsqueeze(2);
        r.vision = text::preprocess_image(media::composite_over_white(resized), processor);
        const auto & g = r.vision.grid_thw;
        if (g[1] * processor.patch_size != h || g[2] * processor.patch_size != w)
            throw UsageError("--image " + c.path.string() + ": the checkpoint's image processor (" +
                             processor_file.string() + ") resizes the " + std::to_string(w) + "x" +
                             std::to_string(h) + " reference again to " + std::to_string(g[2] * processor.patch_size) +
                             "x" + std::to_string(g[1] * processor.patch_size) + " (its min/max pixels), so its vision "
                             "slots would not cover its latents; use an output_resolution whose area lies within the "
                             "processor's pixel range");
        r.vision_tokens = g[0] * g[1] * g[2] / (processor.merge_size * processor.merge_size);
        refs.push_back(std::move(r));
    }
    return refs;
}

VisionBatch vision_batch(const std::vector<Reference> & refs) {
    VisionBatch b;
    std::vector<at::Tensor> patches;
    for (const auto & r : refs) {
        patches.push_back(r.vision.pixel_values);
        b.grid_thw.push_back(r.vision.grid_thw);
        b.tokens.push_back(r.vision_tokens);
    }
    b.pixel_values = at::cat(patches, 0);
    return b;
}

nlohmann::json preprocess_record(const Reference & r, std::int64_t output_resolution) {
    return {{"resize", "calculate_dimensions(output_resolution^2, the image's ratio), multiples of 32"},
            {"filter", "PIL lanczos on RGBA (premultiplied alpha)"},
            {"output_resolution", output_resolution},
            {"width", r.width},
            {"height", r.height},
            {"vae_channels", 4},
            {"vision", "alpha composited over white; Qwen2-VL processor"},
            {"vision_grid_thw", {r.vision.grid_thw[0], r.vision.grid_thw[1], r.vision.grid_thw[2]}},
            {"vision_tokens", r.vision_tokens}};
}

}  // namespace ddo::qwen_image_21
