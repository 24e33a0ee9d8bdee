// decode_video_rgb / decode_audio (media_decode.hpp): the first stream of a kind decoded by libavcodec, frames turned
// into RGB24 by libswscale with the stream's tagged matrix and range, samples into planar float by libswresample.
// Reference: FFmpeg 5.1 doc/examples/demux_decode.c.
#include "ddo/media/media_decode.hpp"

#include <algorithm>
#include <functional>

#include "ddo/error.hpp"
#include "libav_support.hpp"

namespace ddo::media {
namespace {

using namespace detail;

struct OpenDecoder {
    InputPtr in;
    int stream = -1;
    CodecContextPtr ctx;
};

OpenDecoder open_decoder(const std::filesystem::path & path, AVMediaType type, const std::string & describe) {
    OpenDecoder d;
    d.in = open_input(path);
    const AVCodec * codec = nullptr;
    d.stream = av_find_best_stream(d.in.get(), type, -1, -1, &codec, 0);
    if (d.stream < 0)
        throw RuntimeError(describe + ": no " + av_get_media_type_string(type) + " stream it can decode: " +
                           av_error_text(d.stream));
    d.ctx.reset(avcodec_alloc_context3(codec));
    if (!d.ctx) throw RuntimeError(describe + ": out of memory allocating the " + codec->name + " decoder");
    int r = avcodec_parameters_to_context(d.ctx.get(), d.in->streams[d.stream]->codecpar);
    if (r >= 0) r = avcodec_open2(d.ctx.get(), codec, nullptr);
    if (r < 0) throw RuntimeError(describe + ": opening the " + codec->name + " decoder failed: " + av_error_text(r));
    return d;
}

// Feeds every packet of the decoder's stream, then the flush, handing each decoded frame to `take`.
void decode_all(OpenDecoder & d, const std::string & describe, const std::function<void(const AVFrame *)> & take) {
    PacketPtr pkt = make_packet(describe);
    FramePtr frame = make_frame(describe);
    auto receive = [&] {
        for (;;) {
            int r = avcodec_receive_frame(d.ctx.get(), frame.get());
            if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
            if (r < 0) throw RuntimeError(describe + ": decoding failed: " + av_error_text(r));
            take(frame.get());
            av_frame_unref(frame.get());
        }
    };
    for (;;) {
        int r = av_read_frame(d.in.get(), pkt.get());
        if (r == AVERROR_EOF) break;
        if (r < 0) throw RuntimeError(describe + ": reading a packet failed: " + av_error_text(r));
        if (pkt->stream_index == d.stream) {
            r = avcodec_send_packet(d.ctx.get(), pkt.get());
            av_packet_unref(pkt.get());
            if (r < 0) throw RuntimeError(describe + ": the decoder refused a packet: " + av_error_text(r));
            receive();
        } else {
            av_packet_unref(pkt.get());
        }
    }
    int r = avcodec_send_packet(d.ctx.get(), nullptr);
    if (r < 0) throw RuntimeError(describe + ": flushing the decoder failed: " + av_error_text(r));
    receive();
}

int sws_matrix(AVColorSpace space) {
    switch (space) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    default: return SWS_CS_DEFAULT;  // BT.601, what players assume for untagged video
    }
}

}  // namespace

DecodedVideo decode_video_rgb(const std::filesystem::path & path) {
    const std::string describe = "media " + path.string();
    OpenDecoder d = open_decoder(path, AVMEDIA_TYPE_VIDEO, describe);
    DecodedVideo out;
    SwsPtr sws;
    decode_all(d, describe, [&](const AVFrame * f) {
        if (!sws) {
            out.width = f->width;
            out.height = f->height;
            sws.reset(sws_getContext(f->width, f->height, AVPixelFormat(f->format), f->width, f->height,
                                     AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr,
                                     nullptr));
            if (!sws) throw RuntimeError(describe + ": starting the yuv to RGB converter (libswscale) failed");
            const int * matrix = sws_getCoefficients(sws_matrix(f->colorspace));
            sws_setColorspaceDetails(sws.get(), matrix, f->color_range == AVCOL_RANGE_JPEG ? 1 : 0, matrix, 1, 0, 1 << 16,
                                     1 << 16);
        }
        if (f->width != out.width || f->height != out.height)
            throw RuntimeError(describe + ": the frame size changes mid-stream (" + std::to_string(out.width) + "x" +
                               std::to_string(out.height) + " to " + std::to_string(f->width) + "x" +
                               std::to_string(f->height) + ")");
        const std::size_t frame_bytes = std::size_t(out.width) * std::size_t(out.height) * 3;
        out.rgb.resize(out.rgb.size() + frame_bytes);
        std::uint8_t * dst[4] = {out.rgb.data() + out.rgb.size() - frame_bytes, nullptr, nullptr, nullptr};
        const int dst_stride[4] = {out.width * 3, 0, 0, 0};  // sws_scale reads four planes' entries
        sws_scale(sws.get(), f->data, f->linesize, 0, f->height, dst, dst_stride);
        ++out.frames;
    });
    return out;
}

DecodedAudio decode_audio(const std::filesystem::path & path) {
    const std::string describe = "media " + path.string();
    OpenDecoder d = open_decoder(path, AVMEDIA_TYPE_AUDIO, describe);
    DecodedAudio out;
    std::vector<std::vector<float>> planes;
    SwrPtr swr;
    decode_all(d, describe, [&](const AVFrame * f) {
        if (!swr) {
            out.sample_rate = f->sample_rate;
            out.channels = f->ch_layout.nb_channels;
            planes.resize(std::size_t(out.channels));
            SwrContext * raw = nullptr;
            auto * layout = const_cast<AVChannelLayout *>(&f->ch_layout);  // FFmpeg 5.1 takes non-const; only read
            int r = swr_alloc_set_opts2(&raw, layout, AV_SAMPLE_FMT_FLTP, f->sample_rate, layout,
                                        AVSampleFormat(f->format), f->sample_rate, 0, nullptr);
            swr.reset(raw);
            if (r >= 0) r = swr_init(swr.get());
            if (r < 0) throw RuntimeError(describe + ": starting the sample converter failed: " + av_error_text(r));
        }
        std::vector<std::uint8_t *> dst(std::size_t(out.channels));
        for (int c = 0; c < out.channels; ++c) {
            planes[std::size_t(c)].resize(std::size_t(out.frames) + std::size_t(f->nb_samples));
            dst[std::size_t(c)] = reinterpret_cast<std::uint8_t *>(planes[std::size_t(c)].data() + out.frames);
        }
        const int got = swr_convert(swr.get(), dst.data(), f->nb_samples, const_cast<const std::uint8_t **>(f->extended_data),
                                    f->nb_samples);
        if (got != f->nb_samples)
            throw RuntimeError(describe + ": converting decoded samples failed: " +
                               (got < 0 ? av_error_text(got) : std::string("a short conversion")));
        out.frames += got;
    });
    for (const auto & p : planes) out.samples.insert(out.samples.end(), p.begin(), p.begin() + out.frames);
    return out;
}

}  // namespace ddo::media
