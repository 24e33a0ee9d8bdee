// read_image (image_reader.hpp): the header parsed and checked by ddo (image_header.hpp), then the whole file handed
// to libavcodec's png / mjpeg / webp decoder as one packet; its frame turned into 8-bit RGB(A) here for the RGB,
// gray, palette and 16-bit layouts (16 -> 8 bits: the most significant byte, as PIL's "RGB;16B" unpacker), by
// libswscale for the YCbCr ones (JPEG, lossy WebP). Then the EXIF orientation (ImageOps.exif_transpose).
// Reference: diffusers/utils/loading_utils.py load_image; Note [Image input] in docs/architecture.md.
#include "ddo/media/image_reader.hpp"

#include <fstream>
#include <system_error>

#include "ddo/error.hpp"
#include "image_header.hpp"
#include "libav_support.hpp"

extern "C" {
#include <libavutil/opt.h>
}

namespace ddo::media {
namespace {

using namespace detail;

std::vector<std::uint8_t> read_file(const std::filesystem::path & path, const ImageLimits & limits,
                                    const std::string & describe) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw UsageError(describe + ": no such file; give the path of a PNG, JPEG or WebP image");
    if (!std::filesystem::is_regular_file(path, ec))
        throw UsageError(describe + ": not a regular file; give the path of a PNG, JPEG or WebP image");
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw UsageError(describe + ": cannot read its size: " + ec.message());
    if (std::int64_t(size) > limits.max_file_bytes)
        throw UsageError(describe + ": " + std::to_string(size) + " bytes is over the limit of " +
                         std::to_string(limits.max_file_bytes) + " bytes for an image file; give a smaller image");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(describe + ": cannot open it for reading (permissions?)");
    std::vector<std::uint8_t> bytes(size);
    in.read(reinterpret_cast<char *>(bytes.data()), std::streamsize(size));
    if (std::size_t(in.gcount()) != size) throw UsageError(describe + ": reading it failed (the file changed while read?)");
    return bytes;
}

void check_header(const ImageHeader & h, const ImageLimits & limits, const std::string & describe) {
    const std::string size = std::to_string(h.width) + "x" + std::to_string(h.height);
    if (h.width <= 0 || h.height <= 0)
        throw UsageError(describe + ": the " + h.format + " header says " + size +
                         " pixels; an image needs a positive width and height: re-export it");
    if (h.width > limits.max_width || h.height > limits.max_height || h.width * h.height > limits.max_pixels)
        throw UsageError(describe + ": " + size + " pixels (" + h.format + " header) is over the limit of " +
                         std::to_string(limits.max_width) + "x" + std::to_string(limits.max_height) + " and " +
                         std::to_string(limits.max_pixels) + " pixels for a condition image; it was not decoded: " +
                         "downscale it first (the model resizes it to the run's size anyway)");
    if (h.animated)
        throw UsageError(describe + ": an animated " + h.format + " has more than one frame; condition images are "
                         "stills: save the frame you want as PNG, and give keyframes at other frames as --image FILE@FRAME");
    if (h.truncated)
        throw UsageError(describe + ": the " + h.format + " file is truncated (its data ends early); copy it again "
                         "or re-export it");
    if (h.source_color == "cmyk")
        throw UsageError(describe + ": a CMYK JPEG is not read as a condition image; convert it to RGB");
}

AVCodecID codec_of(const std::string & format) {
    if (format == "png") return AV_CODEC_ID_PNG;
    if (format == "jpeg") return AV_CODEC_ID_MJPEG;
    return AV_CODEC_ID_WEBP;
}

// The one frame of the file; UsageError when the decoder refuses the data or gives no or several frames.
FramePtr decode_frame(const std::vector<std::uint8_t> & bytes, const ImageHeader & h, const ImageLimits & limits,
                      const std::string & describe) {
    begin_libav_calls();
    const AVCodec * codec = avcodec_find_decoder(codec_of(h.format));
    if (!codec) throw RuntimeError(describe + ": this FFmpeg has no " + h.format + " decoder");
    CodecContextPtr ctx(avcodec_alloc_context3(codec));
    if (!ctx) throw RuntimeError(describe + ": out of memory allocating the " + codec->name + " decoder");
    ctx->max_pixels = limits.max_pixels;            // a second guard: the decoder refuses a larger frame itself
    ctx->err_recognition = AV_EF_EXPLODE;           // a damaged stream is an error, not a half-grey frame
    ctx->flags &= ~AV_CODEC_FLAG_OUTPUT_CORRUPT;
    ctx->thread_count = 1;
    int r = avcodec_open2(ctx.get(), codec, nullptr);
    if (r < 0) throw RuntimeError(describe + ": opening the " + codec->name + " decoder failed: " + av_error_text(r));
    PacketPtr pkt = make_packet(describe);
    r = av_new_packet(pkt.get(), int(bytes.size()));
    if (r < 0) throw RuntimeError(describe + ": out of memory for the file's packet");
    std::copy(bytes.begin(), bytes.end(), pkt->data);
    FramePtr frame = make_frame(describe), extra = make_frame(describe);
    const std::string refused = describe + ": the " + h.format + " decoder (libavcodec) could not decode it: ";
    const std::string next = "; the file is damaged or uses a feature FFmpeg does not read: re-export it as PNG";
    r = avcodec_send_packet(ctx.get(), pkt.get());
    if (r < 0) throw UsageError(refused + av_error_text(r) + next);
    r = avcodec_send_packet(ctx.get(), nullptr);
    if (r < 0 && r != AVERROR_EOF) throw UsageError(refused + av_error_text(r) + next);
    r = avcodec_receive_frame(ctx.get(), frame.get());
    if (r < 0) throw UsageError(refused + (r == AVERROR_EOF ? std::string("no frame") : av_error_text(r)) + next);
    if (frame->flags & AV_FRAME_FLAG_CORRUPT || frame->decode_error_flags)
        throw UsageError(refused + "the frame is corrupt" + next);
    if (avcodec_receive_frame(ctx.get(), extra.get()) >= 0)
        throw UsageError(describe + ": the file holds more than one frame; condition images are stills: save the "
                         "frame you want as PNG, and give keyframes at other frames as --image FILE@FRAME");
    if (frame->width != h.width || frame->height != h.height)
        throw UsageError(describe + ": the decoded frame is " + std::to_string(frame->width) + "x" +
                         std::to_string(frame->height) + " but the header says " + std::to_string(h.width) + "x" +
                         std::to_string(h.height) + next);
    return frame;
}

// Samples of one row of a packed layout -> 8-bit RGB(A) pixels.
void convert_direct(const AVFrame * f, DecodedImage & out) {
    const auto fmt = AVPixelFormat(f->format);
    const int w = f->width, c = out.channels;
    const std::uint32_t * palette = fmt == AV_PIX_FMT_PAL8 ? reinterpret_cast<const std::uint32_t *>(f->data[1]) : nullptr;
    for (int y = 0; y < f->height; ++y) {
        const std::uint8_t * s = f->data[0] + std::ptrdiff_t(y) * f->linesize[0];
        std::uint8_t * d = out.pixels.data() + std::size_t(y) * std::size_t(w) * std::size_t(c);
        for (int x = 0; x < w; ++x, d += c) {
            std::uint8_t r, g, b, a = 255;
            switch (fmt) {
            case AV_PIX_FMT_RGB24: r = s[3 * x], g = s[3 * x + 1], b = s[3 * x + 2]; break;
            case AV_PIX_FMT_RGBA: r = s[4 * x], g = s[4 * x + 1], b = s[4 * x + 2], a = s[4 * x + 3]; break;
            case AV_PIX_FMT_GRAY8: r = g = b = s[x]; break;
            case AV_PIX_FMT_YA8: r = g = b = s[2 * x], a = s[2 * x + 1]; break;
            case AV_PIX_FMT_MONOBLACK: r = g = b = (s[x >> 3] >> (7 - (x & 7)) & 1) ? 255 : 0; break;
            case AV_PIX_FMT_RGB48BE: r = s[6 * x], g = s[6 * x + 2], b = s[6 * x + 4]; break;
            case AV_PIX_FMT_RGBA64BE: r = s[8 * x], g = s[8 * x + 2], b = s[8 * x + 4], a = s[8 * x + 6]; break;
            case AV_PIX_FMT_GRAY16BE: r = g = b = s[2 * x]; break;
            case AV_PIX_FMT_YA16BE: r = g = b = s[4 * x], a = s[4 * x + 2]; break;
            case AV_PIX_FMT_PAL8: {
                const std::uint32_t argb = palette[s[x]];
                a = std::uint8_t(argb >> 24), r = std::uint8_t(argb >> 16), g = std::uint8_t(argb >> 8), b = std::uint8_t(argb);
                break;
            }
            default: r = g = b = 0; break;  // not reached: is_direct
            }
            d[0] = r, d[1] = g, d[2] = b;
            if (c == 4) d[3] = a;
        }
    }
}

bool is_direct(AVPixelFormat f) {
    switch (f) {
    case AV_PIX_FMT_RGB24: case AV_PIX_FMT_RGBA: case AV_PIX_FMT_GRAY8: case AV_PIX_FMT_YA8:
    case AV_PIX_FMT_MONOBLACK: case AV_PIX_FMT_RGB48BE: case AV_PIX_FMT_RGBA64BE: case AV_PIX_FMT_GRAY16BE:
    case AV_PIX_FMT_YA16BE: case AV_PIX_FMT_PAL8: return true;
    default: return false;
    }
}

// YCbCr (JPEG: full range; lossy WebP: limited range), BT.601, chroma upsampled by libswscale (bicubic, accurate
// rounding, full chroma interpolation, its default chroma siting). PIL decodes with libjpeg-turbo / libwebp, whose
// "fancy" upsampling and IDCT differ: measured against PIL (image_input_parity_test) on a photo-like 96x64 image
// with sharp red edges: JPEG 4:2:0 max |diff| 18, mean 0.97; 4:4:4 max 2, mean 0.06; gray max 1 (the IDCT);
// lossy WebP max 17, mean 0.95. Bilinear measured max 34 / mean 1.8; centre siting (128) broke 4:4:4 (max 98).
void convert_swscale(const AVFrame * f, DecodedImage & out, const std::string & describe) {
    const auto src = AVPixelFormat(f->format);
    const AVPixelFormat dst = out.channels == 4 ? AV_PIX_FMT_RGBA : AV_PIX_FMT_RGB24;
    SwsPtr sws(sws_alloc_context());
    if (!sws) throw RuntimeError(describe + ": out of memory starting libswscale");
    av_opt_set_int(sws.get(), "srcw", f->width, 0);
    av_opt_set_int(sws.get(), "srch", f->height, 0);
    av_opt_set_int(sws.get(), "src_format", src, 0);
    av_opt_set_int(sws.get(), "dstw", f->width, 0);
    av_opt_set_int(sws.get(), "dsth", f->height, 0);
    av_opt_set_int(sws.get(), "dst_format", dst, 0);
    av_opt_set_int(sws.get(), "sws_flags", SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, 0);
    const bool full = f->color_range == AVCOL_RANGE_JPEG || src == AV_PIX_FMT_YUVJ420P || src == AV_PIX_FMT_YUVJ422P ||
                      src == AV_PIX_FMT_YUVJ444P || src == AV_PIX_FMT_YUVJ440P || src == AV_PIX_FMT_YUVJ411P;
    av_opt_set_int(sws.get(), "src_range", full ? 1 : 0, 0);
    av_opt_set_int(sws.get(), "dst_range", 1, 0);
    int r = sws_init_context(sws.get(), nullptr, nullptr);
    if (r < 0) throw UsageError(describe + ": the decoded pixel layout " + av_get_pix_fmt_name(src) +
                                " cannot be converted to RGB (libswscale: " + av_error_text(r) + "); re-export it as PNG");
    const int * matrix = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(sws.get(), matrix, full ? 1 : 0, matrix, 1, 0, 1 << 16, 1 << 16);
    std::uint8_t * planes[4] = {out.pixels.data(), nullptr, nullptr, nullptr};
    const int strides[4] = {f->width * out.channels, 0, 0, 0};
    sws_scale(sws.get(), f->data, f->linesize, 0, f->height, planes, strides);
}

}  // namespace

void apply_exif_orientation(DecodedImage & im, int orientation) {
    if (orientation < 2 || orientation > 8) return;
    const int W = im.width, H = im.height, c = im.channels;
    const bool swap = orientation >= 5;
    const int ow = swap ? H : W, oh = swap ? W : H;
    std::vector<std::uint8_t> out(im.pixels.size());
    for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
            int ix = ox, iy = oy;
            switch (orientation) {
            case 2: ix = W - 1 - ox; break;                            // FLIP_LEFT_RIGHT
            case 3: ix = W - 1 - ox, iy = H - 1 - oy; break;           // ROTATE_180
            case 4: iy = H - 1 - oy; break;                            // FLIP_TOP_BOTTOM
            case 5: ix = oy, iy = ox; break;                           // TRANSPOSE
            case 6: ix = oy, iy = H - 1 - ox; break;                   // ROTATE_270 (90 degrees clockwise)
            case 7: ix = W - 1 - oy, iy = H - 1 - ox; break;           // TRANSVERSE
            case 8: ix = W - 1 - oy, iy = ox; break;                   // ROTATE_90 (90 degrees counter-clockwise)
            }
            const std::uint8_t * s = im.pixels.data() + (std::size_t(iy) * std::size_t(W) + std::size_t(ix)) * std::size_t(c);
            std::uint8_t * d = out.data() + (std::size_t(oy) * std::size_t(ow) + std::size_t(ox)) * std::size_t(c);
            for (int k = 0; k < c; ++k) d[k] = s[k];
        }
    im.pixels = std::move(out);
    im.width = ow, im.height = oh;
    im.orientation = orientation;
}

DecodedImage read_image(const std::filesystem::path & path, const ImageLimits & limits) {
    const std::string describe = "image " + path.string();
    const std::vector<std::uint8_t> bytes = read_file(path, limits, describe);
    const ImageHeader h = parse_image_header(bytes, describe);
    check_header(h, limits, describe);  // before any pixel is decoded
    FramePtr frame = decode_frame(bytes, h, limits, describe);
    const auto fmt = AVPixelFormat(frame->format);
    const AVPixFmtDescriptor * desc = av_pix_fmt_desc_get(fmt);
    if (!desc) throw UsageError(describe + ": the decoder gave an unknown pixel layout; re-export it as PNG");
    DecodedImage out;
    out.format = h.format;
    out.source_width = out.width = frame->width;
    out.source_height = out.height = frame->height;
    out.bit_depth = h.bit_depth;
    out.source_channels = h.source_channels;
    out.source_color = h.source_color;
    bool alpha = (desc->flags & AV_PIX_FMT_FLAG_ALPHA) != 0;
    if (fmt == AV_PIX_FMT_PAL8) {  // a palette with any entry's alpha below 255 (tRNS)
        alpha = false;
        const auto * pal = reinterpret_cast<const std::uint32_t *>(frame->data[1]);
        for (int i = 0; i < 256; ++i) alpha = alpha || (pal[i] >> 24) != 255;
    }
    if (h.format == "webp") alpha = h.has_alpha;  // lossless WebP decodes to ARGB with or without alpha
    out.has_alpha = alpha;
    out.channels = alpha ? 4 : 3;
    out.pixels.resize(std::size_t(out.width) * std::size_t(out.height) * std::size_t(out.channels));
    if (is_direct(fmt)) convert_direct(frame.get(), out);
    else convert_swscale(frame.get(), out, describe);
    apply_exif_orientation(out, h.orientation);
    return out;
}

}  // namespace ddo::media
