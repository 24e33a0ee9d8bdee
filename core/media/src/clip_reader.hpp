// Internal to libddo_media: checks a borrowed AudioClip and hands its samples to an encoder's frames in the
// encoder's sample format, converted by libswresample (same rate, same channels: a format conversion only; float to
// s16 saturates, float to float planar is clipped here to [-1, 1] as diffusers' encode_video clips).
#pragma once

#include <cstdint>
#include <string>

#include "ddo/media/audio_clip.hpp"
#include "libav_support.hpp"

namespace ddo::media::detail {

// UsageError prefixed by `describe` for no samples, a null pointer, channels not 1 or 2, a sample rate outside
// 1..384000 Hz, or a non-finite sample (naming its channel and index).
void check_clip(const AudioClip & clip, const std::string & describe);

// The channel layout of `channels` (mono, stereo).
AVChannelLayout channel_layout(int channels);

class ClipReader {
public:
    // clip: borrowed, checked; it must outlive the reader. out_format: the encoder's sample format.
    ClipReader(const AudioClip & clip, AVSampleFormat out_format, std::string describe);

    // Converts samples [offset, offset + count) of every channel into frame->data (a writable frame of out_format
    // with room for count samples) and sets frame->nb_samples = count.
    void read(std::int64_t offset, int count, AVFrame * frame);

private:
    const AudioClip & clip_;
    AVSampleFormat out_format_;
    std::string describe_;
    SwrPtr swr_;
};

}  // namespace ddo::media::detail
