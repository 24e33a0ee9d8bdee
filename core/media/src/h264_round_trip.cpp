// h264_round_trip (h264_round_trip.hpp): libswscale rgb24 -> yuv420p (SWS_BILINEAR, as PyAV's reformat), libx264
// (crf, preset veryfast, global header as the reference's MP4 stream), FFmpeg's h264 decoder, libswscale yuv420p ->
// rgb24 (SWS_BILINEAR). No container: the MP4 the reference muxes in memory does not change the decoded pixels.
// Reference: diffusers 0.42.1 diffusers/pipelines/ltx2/utils.py apply_image_conditioning_crf; PyAV
// av/video/reformatter.pyx (interpolation BILINEAR, colorspace and range left at swscale's defaults).
#include "ddo/media/h264_round_trip.hpp"

#include "ddo/error.hpp"
#include "libav_support.hpp"

extern "C" {
#include <libavutil/cpu.h>
}

namespace ddo::media {
namespace {

using namespace detail;

const std::string kWhat = "the condition frame's H.264 round trip";

SwsPtr converter(int w, int h, AVPixelFormat from, AVPixelFormat to) {
    SwsPtr s(sws_getContext(w, h, from, w, h, to, SWS_BILINEAR, nullptr, nullptr, nullptr));
    if (!s) throw RuntimeError(kWhat + ": starting libswscale failed");
    return s;
}

FramePtr yuv_frame(int w, int h) {
    FramePtr f = make_frame(kWhat);
    f->format = AV_PIX_FMT_YUV420P;
    f->width = w;
    f->height = h;
    if (int r = av_frame_get_buffer(f.get(), 0); r < 0) throw RuntimeError(kWhat + ": " + av_error_text(r));
    return f;
}

// Every packet libx264 gives for the one frame.
std::vector<PacketPtr> encode(const AVFrame * frame, int crf, std::vector<std::uint8_t> & extradata) {
    const AVCodec * codec = avcodec_find_encoder_by_name("libx264");
    if (!codec) throw RuntimeError(kWhat + ": this FFmpeg has no libx264 encoder");
    CodecContextPtr ctx(avcodec_alloc_context3(codec));
    if (!ctx) throw RuntimeError(kWhat + ": out of memory allocating libx264");
    ctx->width = frame->width;
    ctx->height = frame->height;
    ctx->pix_fmt = AV_PIX_FMT_YUV420P;
    ctx->time_base = AVRational{1, 1};  // add_stream(..., rate=1)
    ctx->framerate = AVRational{1, 1};
    ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;  // the MP4 muxer asks for it
    ctx->thread_count = 1;
    AVDictionary * opts = nullptr;
    av_dict_set(&opts, "crf", std::to_string(crf).c_str(), 0);
    av_dict_set(&opts, "preset", "veryfast", 0);
    // Note [x264 AVX-512]: the same input must give the same bytes.
    if (av_get_cpu_flags() & AV_CPU_FLAG_AVX512) av_dict_set(&opts, "x264-params", "asm=avx2", 0);
    int r = avcodec_open2(ctx.get(), codec, &opts);
    av_dict_free(&opts);
    if (r < 0) throw RuntimeError(kWhat + ": opening libx264 failed: " + av_error_text(r));
    if (ctx->extradata && ctx->extradata_size > 0)
        extradata.assign(ctx->extradata, ctx->extradata + ctx->extradata_size);
    std::vector<PacketPtr> packets;
    auto drain = [&] {
        for (;;) {
            PacketPtr p = make_packet(kWhat);
            r = avcodec_receive_packet(ctx.get(), p.get());
            if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
            if (r < 0) throw RuntimeError(kWhat + ": libx264 failed: " + av_error_text(r));
            packets.push_back(std::move(p));
        }
    };
    if ((r = avcodec_send_frame(ctx.get(), frame)) < 0) throw RuntimeError(kWhat + ": libx264: " + av_error_text(r));
    drain();
    if ((r = avcodec_send_frame(ctx.get(), nullptr)) < 0) throw RuntimeError(kWhat + ": libx264: " + av_error_text(r));
    drain();
    return packets;
}

FramePtr decode(const std::vector<PacketPtr> & packets, const std::vector<std::uint8_t> & extradata) {
    const AVCodec * codec = avcodec_find_decoder(AV_CODEC_ID_H264);
    if (!codec) throw RuntimeError(kWhat + ": this FFmpeg has no h264 decoder");
    CodecContextPtr ctx(avcodec_alloc_context3(codec));
    if (!ctx) throw RuntimeError(kWhat + ": out of memory allocating the h264 decoder");
    ctx->thread_count = 1;
    if (!extradata.empty()) {
        ctx->extradata = static_cast<std::uint8_t *>(av_mallocz(extradata.size() + AV_INPUT_BUFFER_PADDING_SIZE));
        if (!ctx->extradata) throw RuntimeError(kWhat + ": out of memory");
        std::copy(extradata.begin(), extradata.end(), ctx->extradata);
        ctx->extradata_size = int(extradata.size());
    }
    int r = avcodec_open2(ctx.get(), codec, nullptr);
    if (r < 0) throw RuntimeError(kWhat + ": opening the h264 decoder failed: " + av_error_text(r));
    FramePtr frame = make_frame(kWhat);
    for (const auto & p : packets)
        if ((r = avcodec_send_packet(ctx.get(), p.get())) < 0) throw RuntimeError(kWhat + ": h264 decoder: " + av_error_text(r));
    if ((r = avcodec_send_packet(ctx.get(), nullptr)) < 0) throw RuntimeError(kWhat + ": h264 decoder: " + av_error_text(r));
    r = avcodec_receive_frame(ctx.get(), frame.get());  // the first frame, as next(container.decode(stream))
    if (r < 0) throw RuntimeError(kWhat + ": the h264 decoder gave no frame: " + av_error_text(r));
    return frame;
}

}  // namespace

Image8 h264_round_trip(const Image8 & rgb, int crf) {
    if (crf < 0 || crf > 51) throw UsageError(kWhat + ": crf " + std::to_string(crf) + " is out of libx264's range 0..51");
    if (rgb.channels != 3 ||
        rgb.pixels.size() != std::size_t(rgb.width) * std::size_t(rgb.height) * 3)
        throw UsageError(kWhat + ": expects RGB pixels (3 channels), got " + std::to_string(rgb.channels));
    if (crf == 0) return rgb;
    const int w = rgb.width / 2 * 2, h = rgb.height / 2 * 2;
    if (w < 2 || h < 2)
        throw UsageError(kWhat + ": a " + std::to_string(rgb.width) + "x" + std::to_string(rgb.height) +
                         " frame is too small for yuv420p (2x2 at least); set the crf to 0 or give a larger image");
    begin_libav_calls();
    FramePtr yuv = yuv_frame(w, h);
    {
        SwsPtr to_yuv = converter(w, h, AV_PIX_FMT_RGB24, AV_PIX_FMT_YUV420P);
        const std::uint8_t * src[4] = {rgb.pixels.data(), nullptr, nullptr, nullptr};
        const int src_stride[4] = {rgb.width * 3, 0, 0, 0};  // the crop keeps the source's row stride
        sws_scale(to_yuv.get(), src, src_stride, 0, h, yuv->data, yuv->linesize);
    }
    yuv->pts = 0;
    std::vector<std::uint8_t> extradata;
    const std::vector<PacketPtr> packets = encode(yuv.get(), crf, extradata);
    FramePtr decoded = decode(packets, extradata);
    if (decoded->width != w || decoded->height != h)
        throw RuntimeError(kWhat + ": the decoder gave " + std::to_string(decoded->width) + "x" +
                           std::to_string(decoded->height) + " for a " + std::to_string(w) + "x" + std::to_string(h) + " frame");
    Image8 out;
    out.width = w, out.height = h, out.channels = 3;
    out.pixels.resize(std::size_t(w) * std::size_t(h) * 3);
    SwsPtr to_rgb = converter(w, h, AVPixelFormat(decoded->format), AV_PIX_FMT_RGB24);
    std::uint8_t * dst[4] = {out.pixels.data(), nullptr, nullptr, nullptr};
    const int dst_stride[4] = {w * 3, 0, 0, 0};
    sws_scale(to_rgb.get(), decoded->data, decoded->linesize, 0, h, dst, dst_stride);
    return out;
}

}  // namespace ddo::media
