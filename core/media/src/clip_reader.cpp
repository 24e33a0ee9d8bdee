// Checking and converting a borrowed AudioClip for an encoder (clip_reader.hpp). Reference: FFmpeg 5.1
// doc/examples/transcode_aac.c (swr_alloc_set_opts2, swr_convert).
#include "clip_reader.hpp"

#include <algorithm>
#include <cmath>

#include "ddo/error.hpp"

namespace ddo::media::detail {

void check_clip(const AudioClip & clip, const std::string & describe) {
    const int channels = clip.spec.channels;
    if (channels != 1 && channels != 2)
        throw UsageError(describe + ": audio with " + std::to_string(channels) +
                         " channels cannot be written; give 1 (mono) or 2 (stereo) channels");
    if (clip.spec.sample_rate < 1 || clip.spec.sample_rate > 384000)
        throw UsageError(describe + ": an audio sample rate of " + std::to_string(clip.spec.sample_rate) +
                         " Hz is out of range (1..384000); pass the model's sample rate (LTX-2: 24000 or 48000)");
    if (clip.frames <= 0 || clip.samples == nullptr)
        throw UsageError(describe + ": the audio has no samples (" + std::to_string(clip.frames) +
                         "); give at least one sample per channel, or no audio");
    const std::int64_t n = clip.frames * channels;
    for (std::int64_t i = 0; i < n; ++i) {
        if (std::isfinite(clip.samples[i])) continue;
        const std::int64_t channel = clip.layout == SampleLayout::planar ? i / clip.frames : i % channels;
        const std::int64_t index = clip.layout == SampleLayout::planar ? i % clip.frames : i / channels;
        throw UsageError(describe + ": audio sample " + std::to_string(index) + " of channel " + std::to_string(channel) +
                         " is not finite (" + std::to_string(clip.samples[i]) + "); the model produced NaN or inf");
    }
}

AVChannelLayout channel_layout(int channels) {
    AVChannelLayout layout{};
    av_channel_layout_default(&layout, channels);
    return layout;
}

ClipReader::ClipReader(const AudioClip & clip, AVSampleFormat out_format, std::string describe)
    : clip_(clip), out_format_(out_format), describe_(std::move(describe)) {
    AVChannelLayout layout = channel_layout(clip.spec.channels);  // swr_alloc_set_opts2 takes non-const layouts
    const AVSampleFormat in_format = clip.layout == SampleLayout::planar ? AV_SAMPLE_FMT_FLTP : AV_SAMPLE_FMT_FLT;
    SwrContext * raw = nullptr;
    int r = swr_alloc_set_opts2(&raw, &layout, out_format, clip.spec.sample_rate, &layout, in_format,
                                clip.spec.sample_rate, 0, nullptr);
    swr_.reset(raw);
    if (r >= 0) r = swr_init(swr_.get());
    if (r < 0) throw RuntimeError(describe_ + ": starting the sample converter (libswresample) failed: " + av_error_text(r));
}

void ClipReader::read(std::int64_t offset, int count, AVFrame * frame) {
    const int channels = clip_.spec.channels;
    const std::uint8_t * in[2] = {};
    if (clip_.layout == SampleLayout::planar) {
        for (int c = 0; c < channels; ++c)
            in[c] = reinterpret_cast<const std::uint8_t *>(clip_.samples + c * clip_.frames + offset);
    } else {
        in[0] = reinterpret_cast<const std::uint8_t *>(clip_.samples + offset * channels);
    }
    const int got = swr_convert(swr_.get(), frame->data, count, in, count);
    if (got != count)
        throw RuntimeError(describe_ + ": converting " + std::to_string(count) + " audio samples gave " +
                           std::to_string(got) + ": " + (got < 0 ? av_error_text(got) : std::string("a short read")));
    frame->nb_samples = count;
    if (out_format_ == AV_SAMPLE_FMT_FLTP) {
        for (int c = 0; c < channels; ++c) {
            float * p = reinterpret_cast<float *>(frame->data[c]);
            std::transform(p, p + count, p, [](float x) { return std::clamp(x, -1.0f, 1.0f); });
        }
    }
}

}  // namespace ddo::media::detail
