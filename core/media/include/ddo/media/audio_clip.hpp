// A borrowed float waveform as a model produces it (LTX-2's vocoder: [2, samples] in [-1, 1] at 24 or 48 kHz), the
// input of the MP4 and WAV writers. Nothing is copied: the writers read the samples while they encode.
#pragma once

#include <cstdint>

namespace ddo::media {

struct AudioSpec {
    int sample_rate = 0;  // Hz
    int channels = 2;     // 1 or 2
};

// planar: [channels, frames] (channel 0's samples, then channel 1's: a [C, T] tensor); interleaved: [frames, channels].
enum class SampleLayout { planar, interleaved };

struct AudioClip {
    const float * samples = nullptr;  // borrowed: channels * frames floats, finite; outside [-1, 1] is clipped
    std::int64_t frames = 0;          // samples per channel
    AudioSpec spec;
    SampleLayout layout = SampleLayout::planar;
};

}  // namespace ddo::media
