// What a media file holds, read with libavformat (the facts ffprobe shows): container, streams, codec names, frame
// counts (packets counted by reading the file, not the header's claim), frame rate, sample rate, channels, durations,
// tags. Used by the writers' tests and the e2e checks ("one H.264 stream of F frames at fps, one stereo AAC stream of
// the audio's duration").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ddo/media/media_tags.hpp"

namespace ddo::media {

enum class StreamKind { video, audio, other };

struct StreamInfo {
    StreamKind kind = StreamKind::other;
    std::string codec;          // avcodec_get_name: "h264", "aac", "pcm_s16le"
    std::int64_t packets = 0;   // counted: for video, the frames; for AAC, the 1024-sample frames
    double duration_s = 0;      // the stream's duration as the demuxer presents it (edit lists applied)
    std::int64_t bit_rate = 0;  // bits/s as the demuxer reports it (0 when unknown)
    // video
    int width = 0, height = 0;
    std::string pixel_format;     // "yuv420p"
    std::string color_space;      // "bt709" (av_color_space_name)
    int fps_num = 0, fps_den = 1; // the stream's average frame rate
    // audio
    int sample_rate = 0;
    int channels = 0;
    std::string sample_format;  // "fltp", "s16"
};

struct MediaProbe {
    std::string format;     // the demuxer's names: "mov,mp4,m4a,3gp,3g2,mj2", "wav"
    double duration_s = 0;  // the container's duration
    MediaTags tags;         // container metadata
    std::vector<StreamInfo> streams;

    int count(StreamKind kind) const;
    const StreamInfo * first(StreamKind kind) const;  // nullptr when none
};

// Throws RuntimeError naming the path and the libav error when the file cannot be opened or read.
MediaProbe probe_media(const std::filesystem::path & path);

}  // namespace ddo::media
