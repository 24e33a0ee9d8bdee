// Internal to libddo_media: RAII owners for FFmpeg's C objects, and the text of a failed libav call (av_strerror plus
// the last error FFmpeg logged on this thread, which often says more: "Unsupported sample rate 44000").
// Reference: FFmpeg 5.1 libavutil/log.h (av_log_set_callback, av_log_format_line2), libavutil/error.h.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include <filesystem>
#include <memory>
#include <string>

#include "ddo/media/media_tags.hpp"

namespace ddo::media::detail {

struct CodecContextFree { void operator()(AVCodecContext * c) const { avcodec_free_context(&c); } };
struct FrameFree { void operator()(AVFrame * f) const { av_frame_free(&f); } };
struct PacketFree { void operator()(AVPacket * p) const { av_packet_free(&p); } };
struct SwsFree { void operator()(SwsContext * s) const { sws_freeContext(s); } };
struct SwrFree { void operator()(SwrContext * s) const { swr_free(&s); } };
struct InputFree { void operator()(AVFormatContext * f) const { avformat_close_input(&f); } };
// An output context owns its AVIOContext once avio_open succeeded.
struct OutputFree {
    void operator()(AVFormatContext * f) const {
        if (f->pb && !(f->oformat->flags & AVFMT_NOFILE)) avio_closep(&f->pb);
        avformat_free_context(f);
    }
};

using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, SwsFree>;
using SwrPtr = std::unique_ptr<SwrContext, SwrFree>;
using InputPtr = std::unique_ptr<AVFormatContext, InputFree>;
using OutputPtr = std::unique_ptr<AVFormatContext, OutputFree>;

// Routes FFmpeg's log to this library (once per process): errors are kept per thread for av_error_text, everything
// else is dropped (FFmpeg would print encoder statistics to stderr; the host owns the terminal). Then forgets this
// thread's last logged error, so a message never carries a stale one.
void begin_libav_calls();

// "Invalid argument (libav: Unsupported sample rate 44000)": av_strerror(err) and this thread's last logged error
// since begin_libav_calls, if any.
std::string av_error_text(int err);

// Allocated AVFrame / AVPacket, or RuntimeError (out of memory) naming `what`.
FramePtr make_frame(const std::string & what);
PacketPtr make_packet(const std::string & what);

// "file:" + path: libavformat's file protocol, so that no part of a path is taken for a protocol name.
std::string file_url(const std::string & path);

// tags into an AVDictionary (owned by the caller's context); RuntimeError naming `what` when out of memory.
void set_tags(AVDictionary ** dict, const MediaTags & tags, const std::string & what);

// The file opened by libavformat with its stream parameters read (avformat_find_stream_info). RuntimeError naming
// the path and the libav error when it cannot be opened or is not a media file.
InputPtr open_input(const std::filesystem::path & path);

}  // namespace ddo::media::detail
