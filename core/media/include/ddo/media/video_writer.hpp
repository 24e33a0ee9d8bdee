// The MP4 output of a video model: one H.264 stream (libx264, yuv420p, BT.709 limited range, tagged) with exactly the
// frames given at the frame rate given, and optionally one AAC-LC stream (FFmpeg's native encoder) of the audio's
// duration, muxed by libavformat with +faststart (the index first: playable while it downloads). Written to a temp
// file beside the target, fsynced, hashed, renamed. Reference: diffusers' LTX-2 encode_video
// (diffusers/utils/export_utils.py: libx264 yuv420p, AAC at the audio's sample rate) and FFmpeg 5.1 doc/examples/mux.c.
// Note [Colour], Note [MP4 timing], Note [x264 AVX-512] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ddo/media/audio_clip.hpp"
#include "ddo/media/media_tags.hpp"
#include "ddo/media/written_file.hpp"

namespace ddo::media {

struct VideoSpec {
    int width = 0;   // pixels, even (yuv420p halves the chroma planes): odd sizes are refused, never padded
    int height = 0;  // pixels, even
    double fps = 0;  // frames per second, e.g. 24, 25 or 24000/1001.0; stored as the nearest fraction with a
                     // denominator <= 1001 (24 -> 24/1, 23.976... -> 24000/1001)
    int crf = 18;    // libx264 constant rate factor 0..51 (lower: better); 18 as LTX-2's own MP4 export
    std::string preset = "medium";  // libx264 speed preset (ultrafast ... veryslow); medium is x264's default
};

// AAC bit rate per channel: 192 kb/s for stereo, transparent for AAC-LC at 48 kHz and below the AAC-LC ceiling at
// 24 kHz (6144 bits per channel per 1024-sample frame = 144 kb/s per channel).
inline constexpr std::int64_t kAacBitRatePerChannel = 96'000;

struct WrittenVideo {
    WrittenFile file;
    std::string video_codec;    // "h264"
    std::string video_encoder;  // "libx264"
    std::string pixel_format;   // "yuv420p"
    int width = 0, height = 0;
    std::int64_t frames = 0;
    int fps_num = 0, fps_den = 1;    // the frame rate stored in the stream
    double video_duration_s = 0;     // frames * fps_den / fps_num
    std::int64_t video_bit_rate = 0; // bits/s: the H.264 packets' bytes * 8 / video_duration_s
    struct Audio {
        std::string codec;    // "aac"
        std::string encoder;  // "aac" (FFmpeg's native AAC-LC encoder)
        int sample_rate = 0;
        int channels = 0;
        std::int64_t samples = 0;           // per channel, as given
        double duration_s = 0;              // samples / sample_rate
        std::int64_t target_bit_rate = 0;   // bits/s asked of the encoder
        std::int64_t bit_rate = 0;          // bits/s: the AAC packets' bytes * 8 / duration_s
    };
    std::optional<Audio> audio;  // nullopt: the MP4 has no audio stream
};

// The MP4 written incrementally: frames as a decoder finishes them (one at a time or in batches), so no whole-clip
// frame buffer is needed. The audio is given when the writer opens (borrowed until finish): its packets go to the
// muxer interleaved with the frames in presentation order as they come, exactly as write_mp4 hands them, so the
// same frames and audio give the same bytes however they are batched. finish() flushes both encoders, writes the
// index (+faststart) and renames the temp file onto `path`; a writer destroyed before finish() (an error, an
// interrupted decode) removes the temp file and leaves nothing under the name.
class Mp4Writer {
public:
    // Checks the spec (size, fps, crf, preset) and the audio, refuses an existing file under Overwrite::refuse
    // (UsageError), opens the encoders and the temp file and writes the mp4 header. RuntimeError naming the path.
    Mp4Writer(const std::filesystem::path & path, const VideoSpec & spec, const AudioClip * audio,
              Overwrite overwrite = Overwrite::refuse, const MediaTags & tags = {});
    ~Mp4Writer();
    Mp4Writer(const Mp4Writer &) = delete;
    Mp4Writer & operator=(const Mp4Writer &) = delete;

    // rgb: `frames` RGB24 images, contiguous [frames, height, width, 3] (borrowed for the call), the next ones of
    // the clip. RuntimeError naming the path when encoding or writing fails.
    void add_frames(const std::uint8_t * rgb, std::int64_t frames);
    std::int64_t frames() const noexcept;
    // UsageError when no frame was added; RuntimeError when finishing fails (no partial file is left).
    WrittenVideo finish();

private:
    struct State;
    std::unique_ptr<State> s_;
};

// rgb: `frames` RGB24 images of spec.height rows of spec.width pixels, contiguous [frames, height, width, 3]
// (borrowed). audio: nullptr for a silent video (borrowed otherwise). Throws UsageError for a bad setting (odd or
// zero size, no frames, fps or crf out of range, bad audio, an existing file under overwrite = refuse) and
// RuntimeError naming the path and the libav error when encoding or writing fails; no partial file is left either way.
// Mp4Writer with all frames in one batch.
WrittenVideo write_mp4(const std::filesystem::path & path, const VideoSpec & spec, const std::uint8_t * rgb,
                       std::int64_t frames, const AudioClip * audio, Overwrite overwrite = Overwrite::refuse,
                       const MediaTags & tags = {});

}  // namespace ddo::media
