// The WAV output of an audio-producing model: 16-bit PCM (pcm_s16le) muxed by libavformat's wav muxer, the float
// samples converted (and clipped to [-1, 1]) by libswresample. Written to a temp file beside the target, fsynced,
// hashed, renamed. 16-bit rather than float WAV: every player and editor reads it (IEEE-float WAV is not universal),
// and 96 dB of range exceeds what a vocoder's output carries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "ddo/media/audio_clip.hpp"
#include "ddo/media/media_tags.hpp"
#include "ddo/media/written_file.hpp"

namespace ddo::media {

struct WrittenAudio {
    WrittenFile file;
    std::string codec;  // "pcm_s16le"
    int sample_rate = 0;
    int channels = 0;
    std::int64_t samples = 0;  // per channel
    double duration_s = 0;     // samples / sample_rate
};

// audio: borrowed. Throws UsageError for a bad clip (no samples, a non-finite sample, channels not 1 or 2, a sample
// rate outside 1..384000) or an existing file under overwrite = refuse; RuntimeError naming the path and the libav
// error when writing fails. No partial file is left.
WrittenAudio write_wav(const std::filesystem::path & path, const AudioClip & audio,
                       Overwrite overwrite = Overwrite::refuse, const MediaTags & tags = {});

}  // namespace ddo::media
