// Mp4Writer and write_mp4 (video_writer.hpp): RGB24 frames -> libswscale (BT.709, limited range) -> libx264 (yuv420p, CRF) and float
// audio -> libswresample (fltp) -> FFmpeg's AAC encoder, muxed in presentation order by libavformat's mp4 muxer with
// +faststart. Reference: FFmpeg 5.1 doc/examples/mux.c; diffusers' LTX-2 encode_video (diffusers/utils/export_utils.py).
#include "ddo/media/video_writer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "atomic_output.hpp"
#include "clip_reader.hpp"
#include "ddo/error.hpp"
#include "libav_support.hpp"

extern "C" {
#include <libavutil/cpu.h>
#include <libavutil/imgutils.h>
}

namespace ddo::media {
namespace {

using namespace detail;

// x264's preset names (x264.h, x264_preset_names).
constexpr std::array<const char *, 10> kX264Presets = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                                       "medium",    "slow",      "slower",   "veryslow", "placebo"};

// The spec alone (Mp4Writer checks it when it opens; the frames come later).
void check_spec(const VideoSpec & spec, const std::string & describe) {
    const std::string size = std::to_string(spec.width) + "x" + std::to_string(spec.height);
    if (spec.width <= 0 || spec.height <= 0)
        throw UsageError(describe + ": a video of " + size + " pixels cannot be written; give a positive width and height");
    if (spec.width % 2 != 0 || spec.height % 2 != 0) {
        const int w_down = std::max(2, spec.width & ~1), h_down = std::max(2, spec.height & ~1);
        const int w_up = (spec.width + 1) & ~1, h_up = (spec.height + 1) & ~1;
        throw UsageError(describe + ": " + size + " cannot be encoded as yuv420p H.264, which needs an even width and " +
                         "height; generate " + std::to_string(w_down) + "x" + std::to_string(h_down) + " or " +
                         std::to_string(w_up) + "x" + std::to_string(h_up) +
                         " instead (ddo does not pad or crop a model's frames)");
    }
}

void check_rate(const VideoSpec & spec, const std::string & describe) {
    if (!std::isfinite(spec.fps) || spec.fps < 1.0 / 1001 || spec.fps > 1000)
        throw UsageError(describe + ": a frame rate of " + std::to_string(spec.fps) +
                         " fps is out of range (0, 1000]; pass the model's frame rate (LTX-2: 24 or 25)");
    if (spec.crf < 0 || spec.crf > 51)
        throw UsageError(describe + ": crf " + std::to_string(spec.crf) + " is out of libx264's range 0..51 (18: visually lossless)");
    bool known = false;
    for (const char * p : kX264Presets) known = known || spec.preset == p;
    if (!known)
        throw UsageError(describe + ": '" + spec.preset + "' is not a libx264 preset; use one of ultrafast, superfast, " +
                         "veryfast, faster, fast, medium, slow, slower, veryslow, placebo");
}

void check_frames(const std::uint8_t * rgb, std::int64_t frames, const std::string & describe) {
    if (frames <= 0 || rgb == nullptr)
        throw UsageError(describe + ": a video needs at least one frame (got " + std::to_string(frames) + ")");
}

// write_mp4's checks, in its order: size, frames, rate.
void check_video(const VideoSpec & spec, const std::uint8_t * rgb, std::int64_t frames, const std::string & describe) {
    check_spec(spec, describe);
    check_frames(rgb, frames, describe);
    check_rate(spec, describe);
}

// The fraction num/den nearest to fps with den <= 1001, the smallest such den on a tie (as Python's
// Fraction(fps).limit_denominator(1001)): 24 -> 24/1, 24000/1001.0 -> 24000/1001, 23.976 -> 2997/125.
AVRational frame_rate_fraction(double fps) {
    AVRational best{int(std::lround(fps)), 1};
    double best_error = std::abs(fps - best.num);
    for (int den = 2; den <= 1001 && best_error > 1e-9 * fps; ++den) {
        const int num = int(std::lround(fps * den));
        const double error = std::abs(fps - double(num) / den);
        if (error < best_error) best = AVRational{num, den}, best_error = error;
    }
    return best;
}

// One encoder feeding one stream of the muxer.
struct Encoder {
    CodecContextPtr ctx;
    AVStream * stream = nullptr;
    std::int64_t bytes = 0;  // packet bytes handed to the muxer
    bool video = false;
};

CodecContextPtr alloc_context(const AVCodec * codec, const std::string & describe) {
    CodecContextPtr ctx(avcodec_alloc_context3(codec));
    if (!ctx) throw RuntimeError(describe + ": out of memory allocating the " + codec->name + " encoder");
    return ctx;
}

void open_encoder(Encoder & enc, const AVCodec * codec, AVDictionary ** options, AVFormatContext * fmt,
                  const std::string & describe) {
    if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc.ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int r = avcodec_open2(enc.ctx.get(), codec, options);
    if (r < 0) throw RuntimeError(describe + ": opening the " + codec->name + " encoder failed: " + av_error_text(r));
    enc.stream = avformat_new_stream(fmt, nullptr);
    if (!enc.stream) throw RuntimeError(describe + ": out of memory adding a stream");
    enc.stream->time_base = enc.ctx->time_base;
    r = avcodec_parameters_from_context(enc.stream->codecpar, enc.ctx.get());
    if (r < 0) throw RuntimeError(describe + ": copying the " + codec->name + " parameters failed: " + av_error_text(r));
}

// Hands every packet the encoder has ready to the muxer, in the stream's time base.
void drain(Encoder & enc, AVFormatContext * fmt, AVPacket * pkt, const std::string & describe) {
    for (;;) {
        int r = avcodec_receive_packet(enc.ctx.get(), pkt);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
        if (r < 0) throw RuntimeError(describe + ": the " + enc.ctx->codec->name + " encoder failed: " + av_error_text(r));
        if (enc.video && pkt->duration == 0) pkt->duration = 1;  // constant frame rate: one tick of 1/fps
        av_packet_rescale_ts(pkt, enc.ctx->time_base, enc.stream->time_base);
        pkt->stream_index = enc.stream->index;
        enc.bytes += pkt->size;
        r = av_interleaved_write_frame(fmt, pkt);
        if (r < 0)
            throw RuntimeError(describe + ": writing a packet failed: " + av_error_text(r) +
                               "; check the disk (space, permissions)");
    }
}

// frame: nullptr flushes the encoder.
void encode(Encoder & enc, const AVFrame * frame, AVFormatContext * fmt, AVPacket * pkt, const std::string & describe) {
    int r = avcodec_send_frame(enc.ctx.get(), frame);
    if (r < 0) throw RuntimeError(describe + ": the " + enc.ctx->codec->name + " encoder refused a frame: " + av_error_text(r));
    drain(enc, fmt, pkt, describe);
}

void alloc_buffers(AVFrame * frame, const std::string & describe) {
    int r = av_frame_get_buffer(frame, 0);
    if (r < 0) throw RuntimeError(describe + ": allocating a frame buffer failed: " + av_error_text(r));
}

void make_writable(AVFrame * frame, const std::string & describe) {
    int r = av_frame_make_writable(frame);
    if (r < 0) throw RuntimeError(describe + ": making a frame writable failed: " + av_error_text(r));
}

// write_mp4's steps, in order.

// 1. The encoders this libavcodec offers: libx264, and AAC at the clip's rate when there is a clip.
struct Codecs {
    const AVCodec * h264 = nullptr;
    const AVCodec * aac = nullptr;  // null without audio
};

Codecs find_codecs(const AudioClip * audio, const std::string & pre_describe) {
    Codecs c;
    c.h264 = avcodec_find_encoder_by_name("libx264");
    if (!c.h264)
        throw RuntimeError(pre_describe + ": this libavcodec has no libx264 H.264 encoder; install Debian's libavcodec59 " +
                           "(built with libx264) or an FFmpeg configured with --enable-gpl --enable-libx264");
    c.aac = audio ? avcodec_find_encoder_by_name("aac") : nullptr;
    if (audio && !c.aac) throw RuntimeError(pre_describe + ": this libavcodec has no AAC encoder ('aac'); install Debian's libavcodec59");
    if (c.aac) {
        bool supported = false;
        for (const int * r = c.aac->supported_samplerates; r && *r; ++r) supported = supported || *r == audio->spec.sample_rate;
        if (!supported)
            throw UsageError(pre_describe + ": AAC cannot store audio at " + std::to_string(audio->spec.sample_rate) +
                             " Hz; AAC rates are 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, " +
                             "88200, 96000 (LTX-2: 24000 or 48000)");
    }
    return c;
}

// 2. The mp4 muxer writing to url, bit-exact, tagged.
OutputPtr open_muxer(const std::string & url, const MediaTags & tags, const std::string & describe) {
    AVFormatContext * raw = nullptr;
    const int r = avformat_alloc_output_context2(&raw, nullptr, "mp4", url.c_str());
    if (r < 0 || !raw) throw RuntimeError(describe + ": starting the mp4 muxer failed: " + av_error_text(r));
    OutputPtr fmt(raw);
    fmt->flags |= AVFMT_FLAG_BITEXACT;  // no libavformat version string: the same frames give the same bytes
    set_tags(&fmt->metadata, tags, describe);
    return fmt;
}

// 3. The video encoder and its stream: time base 1/fps, one tick per frame, BT.709 limited range.
Encoder open_video_encoder(const AVCodec * h264, const VideoSpec & spec, AVRational rate, AVFormatContext * fmt, const std::string & describe) {
    Encoder video{alloc_context(h264, describe), nullptr, 0, true};
    video.ctx->width = spec.width;
    video.ctx->height = spec.height;
    video.ctx->pix_fmt = AV_PIX_FMT_YUV420P;
    video.ctx->time_base = av_inv_q(rate);
    video.ctx->framerate = rate;
    video.ctx->color_range = AVCOL_RANGE_MPEG;
    video.ctx->colorspace = AVCOL_SPC_BT709;
    video.ctx->color_primaries = AVCOL_PRI_BT709;
    video.ctx->color_trc = AVCOL_TRC_BT709;
    AVDictionary * x264_options = nullptr;
    av_dict_set(&x264_options, "crf", std::to_string(spec.crf).c_str(), 0);
    av_dict_set(&x264_options, "preset", spec.preset.c_str(), 0);
    // Note [x264 AVX-512]: Debian 12's x264 (core 164 r3095) gives different bytes for the same frames from one call to
    // the next on an AVX-512 CPU (its AVX-512 routines depend on memory they do not own); AVX2 and below are
    // reproducible. The report hashes the output, so the same run must give the same file: cap x264 at AVX2 there.
    if (av_get_cpu_flags() & AV_CPU_FLAG_AVX512) av_dict_set(&x264_options, "x264-params", "asm=avx2", 0);
    try {
        open_encoder(video, h264, &x264_options, fmt, describe);
    } catch (...) {
        av_dict_free(&x264_options);
        throw;
    }
    av_dict_free(&x264_options);
    video.stream->avg_frame_rate = rate;
    return video;
}

// 4. The audio encoder and its stream: time base 1/sample_rate, the encoder's 1024-sample frames (the last one shorter).
Encoder open_audio_encoder(const AVCodec * aac, const AudioClip & audio, AVFormatContext * fmt, const std::string & describe) {
    Encoder sound;
    sound.ctx = alloc_context(aac, describe);
    sound.ctx->sample_fmt = AV_SAMPLE_FMT_FLTP;
    sound.ctx->sample_rate = audio.spec.sample_rate;
    const AVChannelLayout layout = channel_layout(audio.spec.channels);
    const int r = av_channel_layout_copy(&sound.ctx->ch_layout, &layout);
    if (r < 0) throw RuntimeError(describe + ": setting the audio channel layout failed: " + av_error_text(r));
    sound.ctx->bit_rate = kAacBitRatePerChannel * audio.spec.channels;
    sound.ctx->time_base = AVRational{1, audio.spec.sample_rate};
    // No libavcodec version string in the stream, and the C float routines: the same bytes on any CPU.
    sound.ctx->flags |= AV_CODEC_FLAG_BITEXACT;
    open_encoder(sound, aac, nullptr, fmt, describe);
    return sound;
}

// 5. The file opened at url (temp_path, for messages) and the mp4 header written (+faststart).
void write_header(AVFormatContext * fmt, const std::string & url, const std::filesystem::path & temp_path, const AudioClip * audio,
                  const std::string & describe) {
    int r = avio_open(&fmt->pb, url.c_str(), AVIO_FLAG_WRITE);
    if (r < 0) throw RuntimeError(describe + ": opening " + temp_path.string() + " failed: " + av_error_text(r));
    AVDictionary * mux_options = nullptr;
    av_dict_set(&mux_options, "movflags", "+faststart", 0);
    // The edit lists (the AAC priming skip, the H.264 reorder delay) are in the movie time scale: the muxer's 1000
    // would store 34000 samples at 48 kHz as 0.708 s; the sample rate stores the audio's duration to the sample.
    if (audio) av_dict_set_int(&mux_options, "movie_timescale", audio->spec.sample_rate, 0);
    r = avformat_write_header(fmt, &mux_options);
    av_dict_free(&mux_options);
    if (r < 0) throw RuntimeError(describe + ": writing the mp4 header failed: " + av_error_text(r));
}

// 6. What one video frame passes through: a padded RGB24 frame, the converter, the yuv420p picture.
struct VideoFrames {
    SwsPtr sws;
    FramePtr rgb;
    FramePtr picture;
};

VideoFrames make_video_frames(const VideoSpec & spec, const std::string & describe) {
    VideoFrames v;
    v.sws.reset(sws_getContext(spec.width, spec.height, AV_PIX_FMT_RGB24, spec.width, spec.height, AV_PIX_FMT_YUV420P,
                               SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr));
    if (!v.sws) throw RuntimeError(describe + ": starting the RGB to yuv420p converter (libswscale) failed");
    // RGB in (full range; the source table is unused for RGB), BT.709 limited-range YUV out, as the stream is tagged.
    sws_setColorspaceDetails(v.sws.get(), sws_getCoefficients(SWS_CS_ITU709), 1, sws_getCoefficients(SWS_CS_ITU709), 0,
                             0, 1 << 16, 1 << 16);
    // libswscale's SIMD reads up to 16 bytes past a row's end: each frame is copied into a padded RGB24 frame whose
    // padding is zero, so nothing past the caller's buffer is read and the output never depends on what lies there.
    v.rgb = make_frame(describe);
    v.rgb->format = AV_PIX_FMT_RGB24;
    v.rgb->width = spec.width;
    v.rgb->height = spec.height;
    alloc_buffers(v.rgb.get(), describe);
    std::memset(v.rgb->buf[0]->data, 0, v.rgb->buf[0]->size);
    v.picture = make_frame(describe);
    v.picture->format = AV_PIX_FMT_YUV420P;
    v.picture->width = spec.width;
    v.picture->height = spec.height;
    alloc_buffers(v.picture.get(), describe);
    return v;
}

// 7. The fltp frame of one encoder frame's samples the clip is read into.
FramePtr make_sample_frame(const Encoder & sound, const AudioClip & audio, const std::string & describe) {
    FramePtr samples = make_frame(describe);
    samples->format = AV_SAMPLE_FMT_FLTP;
    const int r = av_channel_layout_copy(&samples->ch_layout, &sound.ctx->ch_layout);
    if (r < 0) throw RuntimeError(describe + ": setting the audio channel layout failed: " + av_error_text(r));
    samples->sample_rate = audio.spec.sample_rate;
    samples->nb_samples = sound.ctx->frame_size;
    alloc_buffers(samples.get(), describe);
    return samples;
}

// 8. (Mp4Writer::add_frames, finish) Every frame and sample encoded in presentation order across both streams, so
//    the muxer interleaves without holding a whole stream: before frame k, the audio frames that start before it;
//    at the end the rest of the audio, then both encoders flushed.

// 9. The trailer (index, +faststart) written and the file closed.
void finish_mp4(OutputPtr & fmt, const std::string & describe) {
    int r = av_write_trailer(fmt.get());
    if (r < 0) throw RuntimeError(describe + ": finishing the mp4 (index, +faststart) failed: " + av_error_text(r));
    r = avio_closep(&fmt->pb);
    if (r < 0) throw RuntimeError(describe + ": closing the file failed: " + av_error_text(r) + "; check the disk space");
    fmt.reset();
}

// 10. What was written, for the report.
WrittenVideo written_video(WrittenFile file, const Codecs & codecs, const VideoSpec & spec, AVRational rate, std::int64_t frames,
                           const Encoder & video, const AudioClip * audio, const Encoder & sound) {
    WrittenVideo written;
    written.file = std::move(file);
    written.video_codec = avcodec_get_name(AV_CODEC_ID_H264);
    written.video_encoder = codecs.h264->name;
    written.pixel_format = av_get_pix_fmt_name(AV_PIX_FMT_YUV420P);
    written.width = spec.width;
    written.height = spec.height;
    written.frames = frames;
    written.fps_num = rate.num;
    written.fps_den = rate.den;
    written.video_duration_s = double(frames) * rate.den / rate.num;
    written.video_bit_rate = std::llround(double(video.bytes) * 8 / written.video_duration_s);
    if (audio) {
        WrittenVideo::Audio a;
        a.codec = avcodec_get_name(AV_CODEC_ID_AAC);
        a.encoder = codecs.aac->name;
        a.sample_rate = audio->spec.sample_rate;
        a.channels = audio->spec.channels;
        a.samples = audio->frames;
        a.duration_s = double(audio->frames) / audio->spec.sample_rate;
        a.target_bit_rate = sound.ctx->bit_rate;
        a.bit_rate = std::llround(double(sound.bytes) * 8 / a.duration_s);
        written.audio = a;
    }
    return written;
}

}  // namespace

struct Mp4Writer::State {
    std::unique_ptr<AtomicOutput> out;  // destroyed last: the temp file goes after the muxer closed it
    std::string describe;
    Codecs codecs;
    VideoSpec spec;
    const AudioClip * audio = nullptr;
    AVRational rate{0, 1};
    OutputPtr fmt;
    Encoder video, sound;
    VideoFrames v;
    std::unique_ptr<ClipReader> reader;
    FramePtr samples;
    PacketPtr pkt;
    std::int64_t next_frame = 0, next_sample = 0, total_samples = 0;
    bool finished = false;

    void encode_audio_frame() {
        make_writable(samples.get(), describe);
        const int count = int(std::min<std::int64_t>(sound.ctx->frame_size, total_samples - next_sample));
        reader->read(next_sample, count, samples.get());
        samples->pts = next_sample;
        next_sample += count;
        encode(sound, samples.get(), fmt.get(), pkt.get(), describe);
    }
};

Mp4Writer::Mp4Writer(const std::filesystem::path & path, const VideoSpec & spec, const AudioClip * audio,
                     Overwrite overwrite, const MediaTags & tags)
    : s_(std::make_unique<State>()) {
    const std::string pre_describe = "video " + path.string();
    check_spec(spec, pre_describe);
    check_rate(spec, pre_describe);
    if (audio) check_clip(*audio, pre_describe);
    begin_libav_calls();
    auto & s = *s_;
    s.codecs = find_codecs(audio, pre_describe);
    s.spec = spec;
    s.audio = audio;
    s.out = std::make_unique<AtomicOutput>(path, overwrite, "video");
    s.describe = s.out->describe();
    const std::string url = file_url(s.out->temp_path().string());
    s.fmt = open_muxer(url, tags, s.describe);
    s.rate = frame_rate_fraction(spec.fps);
    s.video = open_video_encoder(s.codecs.h264, spec, s.rate, s.fmt.get(), s.describe);
    if (audio) s.sound = open_audio_encoder(s.codecs.aac, *audio, s.fmt.get(), s.describe);
    write_header(s.fmt.get(), url, s.out->temp_path(), audio, s.describe);
    s.v = make_video_frames(spec, s.describe);
    if (audio) {
        s.reader = std::make_unique<ClipReader>(*audio, AV_SAMPLE_FMT_FLTP, s.describe);
        s.samples = make_sample_frame(s.sound, *audio, s.describe);
        s.total_samples = audio->frames;
    }
    s.pkt = make_packet(s.describe);
}

Mp4Writer::~Mp4Writer() = default;

std::int64_t Mp4Writer::frames() const noexcept { return s_->next_frame; }

void Mp4Writer::add_frames(const std::uint8_t * rgb, std::int64_t frames) {
    auto & s = *s_;
    if (s.finished) throw RuntimeError(s.describe + ": frames added after the video was finished");
    check_frames(rgb, frames, s.describe);
    begin_libav_calls();
    const std::size_t frame_bytes = std::size_t(s.spec.width) * std::size_t(s.spec.height) * 3;
    for (std::int64_t i = 0; i < frames; ++i) {
        while (s.next_sample < s.total_samples &&
               av_compare_ts(s.next_frame, s.video.ctx->time_base, s.next_sample, s.sound.ctx->time_base) > 0)
            s.encode_audio_frame();
        make_writable(s.v.picture.get(), s.describe);
        av_image_copy_plane(s.v.rgb->data[0], s.v.rgb->linesize[0], rgb + std::size_t(i) * frame_bytes,
                            s.spec.width * 3, s.spec.width * 3, s.spec.height);
        sws_scale(s.v.sws.get(), s.v.rgb->data, s.v.rgb->linesize, 0, s.spec.height, s.v.picture->data,
                  s.v.picture->linesize);
        s.v.picture->pts = s.next_frame++;
        encode(s.video, s.v.picture.get(), s.fmt.get(), s.pkt.get(), s.describe);
    }
}

WrittenVideo Mp4Writer::finish() {
    auto & s = *s_;
    if (s.finished) throw RuntimeError(s.describe + ": finished twice");
    if (s.next_frame == 0) check_frames(nullptr, 0, s.describe);
    begin_libav_calls();
    s.finished = true;
    while (s.next_sample < s.total_samples) s.encode_audio_frame();
    encode(s.video, nullptr, s.fmt.get(), s.pkt.get(), s.describe);
    if (s.audio) encode(s.sound, nullptr, s.fmt.get(), s.pkt.get(), s.describe);
    finish_mp4(s.fmt, s.describe);
    return written_video(s.out->commit(), s.codecs, s.spec, s.rate, s.next_frame, s.video, s.audio, s.sound);
}

WrittenVideo write_mp4(const std::filesystem::path & path, const VideoSpec & spec, const std::uint8_t * rgb,
                       std::int64_t frames, const AudioClip * audio, Overwrite overwrite, const MediaTags & tags) {
    check_video(spec, rgb, frames, "video " + path.string());
    Mp4Writer writer(path, spec, audio, overwrite, tags);
    writer.add_frames(rgb, frames);
    return writer.finish();
}

}  // namespace ddo::media
