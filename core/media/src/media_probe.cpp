// probe_media (media_probe.hpp): libavformat's view of a file, as ffprobe -show_streams -count_packets shows it.
// Reference: FFmpeg 5.1 fftools/ffprobe.c (show_stream, -count_packets).
#include "ddo/media/media_probe.hpp"

#include "ddo/error.hpp"
#include "libav_support.hpp"

namespace ddo::media {

using namespace detail;

int MediaProbe::count(StreamKind kind) const {
    int n = 0;
    for (const auto & s : streams) n += s.kind == kind;
    return n;
}

const StreamInfo * MediaProbe::first(StreamKind kind) const {
    for (const auto & s : streams)
        if (s.kind == kind) return &s;
    return nullptr;
}

MediaProbe probe_media(const std::filesystem::path & path) {
    InputPtr in = open_input(path);
    MediaProbe probe;
    probe.format = in->iformat->name;
    if (in->duration != AV_NOPTS_VALUE) probe.duration_s = double(in->duration) / AV_TIME_BASE;
    for (const AVDictionaryEntry * e = nullptr; (e = av_dict_get(in->metadata, "", e, AV_DICT_IGNORE_SUFFIX));)
        probe.tags.emplace_back(e->key, e->value);
    for (unsigned i = 0; i < in->nb_streams; ++i) {
        const AVStream * st = in->streams[i];
        const AVCodecParameters * par = st->codecpar;
        StreamInfo s;
        s.codec = avcodec_get_name(par->codec_id);
        s.bit_rate = par->bit_rate;
        if (st->duration != AV_NOPTS_VALUE) s.duration_s = double(st->duration) * av_q2d(st->time_base);
        if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
            s.kind = StreamKind::video;
            s.width = par->width;
            s.height = par->height;
            if (const char * name = av_get_pix_fmt_name(AVPixelFormat(par->format))) s.pixel_format = name;
            if (const char * name = av_color_space_name(par->color_space)) s.color_space = name;
            s.fps_num = st->avg_frame_rate.num;
            s.fps_den = st->avg_frame_rate.den;
        } else if (par->codec_type == AVMEDIA_TYPE_AUDIO) {
            s.kind = StreamKind::audio;
            s.sample_rate = par->sample_rate;
            s.channels = par->ch_layout.nb_channels;
            if (const char * name = av_get_sample_fmt_name(AVSampleFormat(par->format))) s.sample_format = name;
        }
        probe.streams.push_back(s);
    }
    PacketPtr pkt = make_packet("media " + path.string());
    for (;;) {
        int r = av_read_frame(in.get(), pkt.get());
        if (r == AVERROR_EOF) break;
        if (r < 0) throw RuntimeError("media " + path.string() + ": reading a packet failed: " + av_error_text(r));
        if (pkt->stream_index >= 0 && unsigned(pkt->stream_index) < probe.streams.size())
            ++probe.streams[std::size_t(pkt->stream_index)].packets;
        av_packet_unref(pkt.get());
    }
    return probe;
}

}  // namespace ddo::media
