// Condition images (condition_image.hpp): the PATH[@FRAME] request, the RGB view and the normalised tensor.
// Reference: diffusers/image_processor.py VaeImageProcessor.pil_to_numpy, numpy_to_pt, normalize.
#include "ddo/model/condition_image.hpp"

#include <ATen/ATen.h>

#include <cctype>

#include "ddo/error.hpp"

namespace ddo::model {

ConditionImageRequest parse_condition_image(const std::string & spec, const std::string & where) {
    ConditionImageRequest r;
    std::string path = spec;
    const auto at = spec.rfind('@');
    if (at != std::string::npos && at + 1 < spec.size()) {
        const std::string digits = spec.substr(at + 1);
        bool all = true;
        for (char c : digits) all = all && std::isdigit(static_cast<unsigned char>(c));
        if (all) {
            if (digits.size() > 9)
                throw UsageError(where + ": '" + spec + "': frame " + digits + " is too large; give the frame index "
                                 "the image conditions (0 = the first)");
            r.frame = std::stoll(digits);
            path = spec.substr(0, at);
        }
    }
    if (path.empty()) throw UsageError(where + ": '" + spec + "' names no file; give PATH[@FRAME]");
    r.path = path;
    return r;
}

media::Image8 rgb_of(const media::DecodedImage & im) {
    media::Image8 out;
    out.width = im.width, out.height = im.height, out.channels = 3;
    if (im.channels == 3) {
        out.pixels = im.pixels;
        return out;
    }
    out.pixels.resize(std::size_t(im.width) * std::size_t(im.height) * 3);
    for (std::size_t p = 0, q = 0; q < out.pixels.size(); p += std::size_t(im.channels), q += 3)
        for (std::size_t k = 0; k < 3; ++k) out.pixels[q + k] = im.pixels[p + k];
    return out;
}

at::Tensor image_to_tensor(const media::Image8 & im, bool keep_alpha) {
    const int c = keep_alpha ? im.channels : std::min(im.channels, 3);
    at::Tensor x = at::empty({1, c, im.height, im.width}, at::kFloat);
    float * d = x.data_ptr<float>();
    const std::size_t plane = std::size_t(im.width) * std::size_t(im.height);
    // float32 x / 255 then 2 x - 1, each rounded as numpy/torch round them (image_input_parity_test: exact)
    for (std::size_t p = 0; p < plane; ++p)
        for (int k = 0; k < c; ++k)
            d[std::size_t(k) * plane + p] = 2.0f * (float(im.pixels[p * std::size_t(im.channels) + std::size_t(k)]) / 255.0f) - 1.0f;
    return x;
}

at::Tensor image_to_tensor(const media::DecodedImage & im, bool keep_alpha) {
    media::Image8 view;
    view.width = im.width, view.height = im.height, view.channels = im.channels;
    view.pixels = im.pixels;
    return image_to_tensor(view, keep_alpha);
}

}  // namespace ddo::model
