// Resizing 8-bit images as Pillow does (PIL.Image.Image.resize(size, resample), box and reducing_gap unset): the same
// filters, the same fixed-point arithmetic and the same pass order, so that a condition image resized by ddo equals
// the one diffusers' VaeImageProcessor hands the VAE, byte for byte (image_input_parity_test checks it against the
// fixture venv's Pillow). A port of Pillow's src/libImaging/Resample.c (precompute_coeffs, normalize_coeffs_8bpc,
// ImagingResampleHorizontal_8bpc / Vertical_8bpc, ImagingResampleInner), Geometry.c (ImagingScaleAffine: NEAREST)
// and Convert.c (rgbA2rgba / rgba2rgbA: RGBA and LA are resized premultiplied). Note [PIL resize] in
// docs/architecture.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddo::media {

// PIL.Image.Resampling's filters (diffusers' PIL_INTERPOLATION names them "nearest", "bilinear"/"linear",
// "bicubic", "lanczos"; "box" and "hamming" are Pillow's).
enum class ResampleFilter { nearest, box, bilinear, hamming, bicubic, lanczos };

// "nearest" | "box" | "bilinear" (or "linear") | "hamming" | "bicubic" | "lanczos"; UsageError naming `what` else.
ResampleFilter parse_resample_filter(const std::string & name, const std::string & what);
const char * to_string(ResampleFilter filter);

// Interleaved 8-bit pixels [height, width, channels]; channels 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA).
struct Image8 {
    int width = 0, height = 0, channels = 3;
    std::vector<std::uint8_t> pixels;
};

// `image` resized to out_width x out_height as PIL's Image.resize((out_width, out_height), filter) for mode L, LA,
// RGB or RGBA (LA and RGBA go through premultiplied alpha except with NEAREST, as Pillow). The same size returns a
// copy. UsageError for an empty image, a size below 1 or a channel count outside 1..4.
Image8 resize_like_pil(const Image8 & image, int out_width, int out_height, ResampleFilter filter);

// What diffusers' VaeImageProcessor.preprocess does to a PIL image before normalising it (image_processor.py:
// get_default_height_width floors height and width to multiples of vae_scale_factor, then resize(..., "default")
// calls image.resize((width, height), resample=PIL_INTERPOLATION[resample], reducing_gap=None)). `resample` is the
// processor's config (LTX-2's VideoProcessor: "bilinear"; the VaeImageProcessor default: "lanczos").
// The processor does not convert modes (do_convert_rgb=False): give RGB, as load_image's convert("RGB") does.
Image8 resize_like_vae_image_processor(const Image8 & image, int height, int width, int vae_scale_factor,
                                       const std::string & resample);

}  // namespace ddo::media
