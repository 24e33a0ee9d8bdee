// write_wav (wav_writer.hpp): float samples -> libswresample (s16, saturating) -> libavcodec's pcm_s16le -> libavformat's
// wav muxer. Reference: FFmpeg 5.1 doc/examples/mux.c (the audio half), libavformat/wavenc.c.
#include "ddo/media/wav_writer.hpp"

#include <algorithm>

#include "atomic_output.hpp"
#include "clip_reader.hpp"
#include "ddo/error.hpp"
#include "libav_support.hpp"

namespace ddo::media {
namespace {

using namespace detail;

constexpr int kChunkSamples = 4096;  // per channel, per packet

}  // namespace

WrittenAudio write_wav(const std::filesystem::path & path, const AudioClip & audio, Overwrite overwrite,
                       const MediaTags & tags) {
    check_clip(audio, "audio " + path.string());
    begin_libav_calls();
    const AVCodec * pcm = avcodec_find_encoder(AV_CODEC_ID_PCM_S16LE);
    if (!pcm) throw RuntimeError("audio " + path.string() + ": this libavcodec has no pcm_s16le encoder");

    AtomicOutput out(path, overwrite, "audio");
    const std::string describe = out.describe();
    const std::string url = file_url(out.temp_path().string());

    AVFormatContext * raw = nullptr;
    int r = avformat_alloc_output_context2(&raw, nullptr, "wav", url.c_str());
    if (r < 0 || !raw) throw RuntimeError(describe + ": starting the wav muxer failed: " + av_error_text(r));
    OutputPtr fmt(raw);
    fmt->flags |= AVFMT_FLAG_BITEXACT;  // no libavformat version in LIST/INFO: the same samples give the same bytes
    set_tags(&fmt->metadata, tags, describe);

    CodecContextPtr ctx(avcodec_alloc_context3(pcm));
    if (!ctx) throw RuntimeError(describe + ": out of memory allocating the pcm_s16le encoder");
    ctx->sample_fmt = AV_SAMPLE_FMT_S16;
    ctx->sample_rate = audio.spec.sample_rate;
    const AVChannelLayout layout = channel_layout(audio.spec.channels);
    r = av_channel_layout_copy(&ctx->ch_layout, &layout);
    if (r >= 0) r = avcodec_open2(ctx.get(), pcm, nullptr);
    if (r < 0) throw RuntimeError(describe + ": opening the pcm_s16le encoder failed: " + av_error_text(r));
    AVStream * stream = avformat_new_stream(fmt.get(), nullptr);
    if (!stream) throw RuntimeError(describe + ": out of memory adding a stream");
    stream->time_base = AVRational{1, audio.spec.sample_rate};
    r = avcodec_parameters_from_context(stream->codecpar, ctx.get());
    if (r < 0) throw RuntimeError(describe + ": copying the pcm_s16le parameters failed: " + av_error_text(r));

    r = avio_open(&fmt->pb, url.c_str(), AVIO_FLAG_WRITE);
    if (r < 0) throw RuntimeError(describe + ": opening " + out.temp_path().string() + " failed: " + av_error_text(r));
    r = avformat_write_header(fmt.get(), nullptr);
    if (r < 0) throw RuntimeError(describe + ": writing the wav header failed: " + av_error_text(r));

    ClipReader reader(audio, AV_SAMPLE_FMT_S16, describe);
    FramePtr frame = make_frame(describe);
    frame->format = AV_SAMPLE_FMT_S16;
    r = av_channel_layout_copy(&frame->ch_layout, &ctx->ch_layout);
    frame->sample_rate = audio.spec.sample_rate;
    frame->nb_samples = kChunkSamples;
    if (r >= 0) r = av_frame_get_buffer(frame.get(), 0);
    if (r < 0) throw RuntimeError(describe + ": allocating an audio frame failed: " + av_error_text(r));
    PacketPtr pkt = make_packet(describe);

    auto drain = [&] {
        for (;;) {
            int e = avcodec_receive_packet(ctx.get(), pkt.get());
            if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
            if (e < 0) throw RuntimeError(describe + ": the pcm_s16le encoder failed: " + av_error_text(e));
            av_packet_rescale_ts(pkt.get(), ctx->time_base, stream->time_base);
            pkt->stream_index = stream->index;
            e = av_write_frame(fmt.get(), pkt.get());
            if (e < 0)
                throw RuntimeError(describe + ": writing samples failed: " + av_error_text(e) +
                                   "; check the disk (space, permissions)");
        }
    };
    auto send = [&](const AVFrame * f) {
        int e = avcodec_send_frame(ctx.get(), f);
        if (e < 0) throw RuntimeError(describe + ": the pcm_s16le encoder refused samples: " + av_error_text(e));
        drain();
    };
    for (std::int64_t offset = 0; offset < audio.frames;) {
        r = av_frame_make_writable(frame.get());
        if (r < 0) throw RuntimeError(describe + ": making an audio frame writable failed: " + av_error_text(r));
        const int count = int(std::min<std::int64_t>(kChunkSamples, audio.frames - offset));
        reader.read(offset, count, frame.get());
        frame->pts = offset;
        offset += count;
        send(frame.get());
    }
    send(nullptr);

    r = av_write_trailer(fmt.get());
    if (r < 0) throw RuntimeError(describe + ": finishing the wav (chunk sizes) failed: " + av_error_text(r));
    r = avio_closep(&fmt->pb);
    if (r < 0) throw RuntimeError(describe + ": closing the file failed: " + av_error_text(r) + "; check the disk space");
    fmt.reset();

    WrittenAudio written;
    written.file = out.commit();
    written.codec = pcm->name;
    written.sample_rate = audio.spec.sample_rate;
    written.channels = audio.spec.channels;
    written.samples = audio.frames;
    written.duration_s = double(audio.frames) / audio.spec.sample_rate;
    return written;
}

}  // namespace ddo::media
