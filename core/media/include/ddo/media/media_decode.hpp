// Decoding a written file back (libavcodec, colour conversion by libswscale, sample conversion by libswresample):
// the writers' round-trip tests and the e2e checks compare what a player would show with what the model produced.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace ddo::media {

struct DecodedVideo {
    int width = 0, height = 0;
    std::int64_t frames = 0;
    std::vector<std::uint8_t> rgb;  // [frames, height, width, 3], converted with the stream's tagged colour matrix
};

struct DecodedAudio {
    int sample_rate = 0;
    int channels = 0;
    std::int64_t frames = 0;     // samples per channel, as the decoder delivers them (AAC: edit-list trimmed start)
    std::vector<float> samples;  // planar [channels, frames]
};

// The first video / audio stream of the file. RuntimeError naming the path when it has none or decoding fails.
DecodedVideo decode_video_rgb(const std::filesystem::path & path);
DecodedAudio decode_audio(const std::filesystem::path & path);

}  // namespace ddo::media
