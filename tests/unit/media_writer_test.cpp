// media_writer_test: libddo_media's MP4 and WAV writers (core/media), checked through its own probe and decoders.
// A synthetic clip (17 frames of 64x48 moving gradients at 24 fps, a stereo 440 Hz tone at 48 kHz and at 24 kHz):
// - the MP4 has one h264 stream (yuv420p, BT.709) of exactly 17 packets at 24/1 fps and one stereo AAC stream whose
//   duration is the audio's within one AAC frame (1024 samples); the index (moov) precedes the data (+faststart);
// - decoded back, frames are within a mean absolute error of 2.0 levels of 255 (measured 1.04) of the input (H.264 at
//   CRF 18, 4:2:0 chroma: smooth gradients lose little), the tone within a mean absolute error of 0.015 (amplitude 0.5; AAC at
//   96 kb/s per channel: FFmpeg's native encoder measures 0.0098 at 48 kHz, 0.0003 at 24 kHz; a one-sample shift
//   would measure 0.02 at 48 kHz, a swapped or silent channel 0.3);
// - the WAV round trip is exact for pcm_s16le: each sample decodes to clamp(lrint(x * 32768), -32768, 32767) / 32768
//   (out-of-range input saturates); planar and interleaved input give the same bytes;
// - the same clip written twice gives the same bytes (the report hashes them; Note [x264 AVX-512] in video_writer.cpp);
// - the reported SHA-256 and size are those of the file; refusals (odd size, no frames, an existing file, an
//   unwritable directory) name the path and the next step and leave no file behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <numbers>
#include <string>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/media/media_decode.hpp"
#include "ddo/media/media_probe.hpp"
#include "ddo/media/video_writer.hpp"
#include "ddo/media/wav_writer.hpp"
#include "ddo/util/file_digest.hpp"

namespace fs = std::filesystem;
using namespace ddo::media;

namespace {

constexpr int kWidth = 64, kHeight = 48, kFrames = 17;
constexpr double kFps = 24;
constexpr double kFrameMaeTolerance = 2.0;  // levels of 255
constexpr double kToneMaeTolerance = 0.015;

class MediaWriter : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("ddo-media-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(dir_, ec);
    }
    // Entries of the test directory (no temp file may be left behind).
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        for (const auto & e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
    fs::path dir_;
};

// Smooth gradients that move with t: [frames, height, width, 3].
std::vector<std::uint8_t> gradient_frames(int frames, int width, int height) {
    std::vector<std::uint8_t> rgb(std::size_t(frames) * height * width * 3);
    std::size_t i = 0;
    for (int t = 0; t < frames; ++t)
        for (int y = 0; y < height; ++y)
            for (int x = 0; x < width; ++x) {
                rgb[i++] = std::uint8_t(40 + 2 * x + 4 * t);
                rgb[i++] = std::uint8_t(30 + 4 * y);
                rgb[i++] = std::uint8_t(200 - 2 * x + y);
            }
    return rgb;
}

// A 440 Hz tone, amplitude 0.5: sine on the left, cosine on the right, planar [2, frames].
std::vector<float> tone_planar(std::int64_t frames, int sample_rate) {
    std::vector<float> s(std::size_t(frames) * 2);
    for (std::int64_t i = 0; i < frames; ++i) {
        const double phase = 2 * std::numbers::pi * 440.0 * double(i) / sample_rate;
        s[std::size_t(i)] = float(0.5 * std::sin(phase));
        s[std::size_t(frames + i)] = float(0.5 * std::cos(phase));
    }
    return s;
}

std::vector<float> interleave(const std::vector<float> & planar, std::int64_t frames) {
    std::vector<float> out(planar.size());
    for (std::int64_t i = 0; i < frames; ++i) {
        out[std::size_t(2 * i)] = planar[std::size_t(i)];
        out[std::size_t(2 * i + 1)] = planar[std::size_t(frames + i)];
    }
    return out;
}

std::string file_bytes(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::int64_t samples_for_video(int sample_rate) { return std::int64_t(std::llround(kFrames / kFps * sample_rate)); }

// The MP4 of the synthetic clip with the tone at `sample_rate` (in `layout`), checked end to end.
void check_clip_mp4(const fs::path & path, int sample_rate, SampleLayout layout) {
    const auto rgb = gradient_frames(kFrames, kWidth, kHeight);
    const std::int64_t n = samples_for_video(sample_rate);
    const auto planar = tone_planar(n, sample_rate);
    const auto samples = layout == SampleLayout::planar ? planar : interleave(planar, n);
    const AudioClip clip{samples.data(), n, AudioSpec{sample_rate, 2}, layout};
    const VideoSpec spec{kWidth, kHeight, kFps};

    const WrittenVideo w = write_mp4(path, spec, rgb.data(), kFrames, &clip, Overwrite::refuse, {{"comment", "ddo test"}});
    EXPECT_EQ(w.file.path, path);
    EXPECT_EQ(w.file.size, fs::file_size(path));
    EXPECT_EQ(w.file.sha256, ddo::file_sha256(path).value());
    EXPECT_EQ(w.video_codec, "h264");
    EXPECT_EQ(w.video_encoder, "libx264");
    EXPECT_EQ(w.frames, kFrames);
    EXPECT_EQ(w.fps_num, 24);
    EXPECT_EQ(w.fps_den, 1);
    EXPECT_GT(w.video_bit_rate, 0);
    ASSERT_TRUE(w.audio.has_value());
    EXPECT_EQ(w.audio->codec, "aac");
    EXPECT_EQ(w.audio->channels, 2);
    EXPECT_EQ(w.audio->target_bit_rate, 2 * kAacBitRatePerChannel);
    std::printf("[ written   ] %s: %llu bytes, sha256 %s, h264 %lld b/s, aac %lld b/s at %d Hz\n",
                path.filename().c_str(), (unsigned long long)w.file.size, ddo::short_digest(w.file.sha256).c_str(),
                (long long)w.video_bit_rate, (long long)w.audio->bit_rate, sample_rate);

    // +faststart: the index (moov) before the media data (mdat).
    const std::string bytes = file_bytes(path);
    const auto moov = bytes.find("moov"), mdat = bytes.find("mdat");
    ASSERT_NE(moov, std::string::npos);
    ASSERT_NE(mdat, std::string::npos);
    EXPECT_LT(moov, mdat);

    const MediaProbe probe = probe_media(path);
    EXPECT_NE(probe.format.find("mp4"), std::string::npos) << probe.format;
    EXPECT_EQ(probe.streams.size(), 2u);
    ASSERT_EQ(probe.count(StreamKind::video), 1);
    ASSERT_EQ(probe.count(StreamKind::audio), 1);
    const StreamInfo & v = *probe.first(StreamKind::video);
    EXPECT_EQ(v.codec, "h264");
    EXPECT_EQ(v.packets, kFrames);
    EXPECT_EQ(v.fps_num, 24);
    EXPECT_EQ(v.fps_den, 1);
    EXPECT_EQ(v.width, kWidth);
    EXPECT_EQ(v.height, kHeight);
    EXPECT_EQ(v.pixel_format, "yuv420p");
    EXPECT_EQ(v.color_space, "bt709");
    EXPECT_NEAR(v.duration_s, kFrames / kFps, 1e-9);
    const StreamInfo & a = *probe.first(StreamKind::audio);
    EXPECT_EQ(a.codec, "aac");
    EXPECT_EQ(a.channels, 2);
    EXPECT_EQ(a.sample_rate, sample_rate);
    const double expected_s = double(n) / sample_rate, aac_frame_s = 1024.0 / sample_rate;
    std::printf("[ probe     ] %s: h264 %lld frames at %d/%d fps (%.4f s); aac %d ch %d Hz %.6f s (audio %.6f s, one "
                "AAC frame %.4f s)\n",
                path.filename().c_str(), (long long)v.packets, v.fps_num, v.fps_den, v.duration_s, a.channels,
                a.sample_rate, a.duration_s, expected_s, aac_frame_s);
    EXPECT_NEAR(a.duration_s, expected_s, aac_frame_s);
    EXPECT_EQ(probe.tags.end(), std::find_if(probe.tags.begin(), probe.tags.end(), [](const auto & t) {
                  return t.first == "encoder";  // bit-exact: no libavformat version string
              }));
    EXPECT_NE(probe.tags.end(), std::find(probe.tags.begin(), probe.tags.end(), std::pair<std::string, std::string>(
                                                                                    "comment", "ddo test")));

    const DecodedVideo dv = decode_video_rgb(path);
    ASSERT_EQ(dv.frames, kFrames);
    ASSERT_EQ(dv.width, kWidth);
    ASSERT_EQ(dv.height, kHeight);
    ASSERT_EQ(dv.rgb.size(), rgb.size());
    double err = 0;
    for (std::size_t i = 0; i < rgb.size(); ++i) err += std::abs(int(dv.rgb[i]) - int(rgb[i]));
    err /= double(rgb.size());
    std::printf("[ roundtrip ] %s frames: mean abs error %.4f levels (tolerance %.1f)\n", path.filename().c_str(), err,
                kFrameMaeTolerance);
    EXPECT_LT(err, kFrameMaeTolerance);

    // The tone, away from the first and last AAC frames (the encoder's transients).
    const DecodedAudio da = decode_audio(path);
    ASSERT_EQ(da.channels, 2);
    ASSERT_EQ(da.sample_rate, sample_rate);
    ASSERT_GE(da.frames, n);
    double tone_err = 0;
    std::int64_t counted = 0;
    for (int c = 0; c < 2; ++c)
        for (std::int64_t i = 1024; i < n - 1024; ++i, ++counted)
            tone_err += std::abs(da.samples[std::size_t(c * da.frames + i)] - planar[std::size_t(c * n + i)]);
    tone_err /= double(counted);
    std::printf("[ roundtrip ] %s tone: mean abs error %.5f (tolerance %.3f), %lld samples decoded for %lld\n",
                path.filename().c_str(), tone_err, kToneMaeTolerance, (long long)da.frames, (long long)n);
    EXPECT_LT(tone_err, kToneMaeTolerance);
}

template <class E>
std::string message_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const E & e) {
        return e.what();
    }
    ADD_FAILURE() << "no exception of the expected type";
    return {};
}

}  // namespace

TEST_F(MediaWriter, Mp4WithStereoAudioAt48kHz) { check_clip_mp4(dir_ / "video.mp4", 48000, SampleLayout::planar); }

TEST_F(MediaWriter, Mp4WithInterleavedStereoAudioAt24kHz) {
    check_clip_mp4(dir_ / "video.mp4", 24000, SampleLayout::interleaved);
}

TEST_F(MediaWriter, Mp4WithoutAudioHasOneStream) {
    const auto rgb = gradient_frames(5, 32, 16);
    const WrittenVideo w = write_mp4(dir_ / "v.mp4", VideoSpec{32, 16, 25}, rgb.data(), 5, nullptr);
    EXPECT_FALSE(w.audio.has_value());
    const MediaProbe probe = probe_media(dir_ / "v.mp4");
    ASSERT_EQ(probe.streams.size(), 1u);
    EXPECT_EQ(probe.streams[0].kind, StreamKind::video);
    EXPECT_EQ(probe.streams[0].packets, 5);
    EXPECT_EQ(probe.streams[0].fps_num, 25);
    EXPECT_EQ(entries(), std::vector<std::string>{"v.mp4"});
}

TEST_F(MediaWriter, SameInputGivesTheSameBytes) {
    const auto rgb = gradient_frames(kFrames, kWidth, kHeight);
    const std::int64_t n = samples_for_video(48000);
    const auto tone = tone_planar(n, 48000);
    const AudioClip clip{tone.data(), n, AudioSpec{48000, 2}, SampleLayout::planar};
    const WrittenVideo a = write_mp4(dir_ / "a.mp4", VideoSpec{kWidth, kHeight, kFps}, rgb.data(), kFrames, &clip);
    const WrittenVideo b = write_mp4(dir_ / "b.mp4", VideoSpec{kWidth, kHeight, kFps}, rgb.data(), kFrames, &clip);
    EXPECT_EQ(a.file.sha256, b.file.sha256);
    EXPECT_TRUE(file_bytes(dir_ / "a.mp4") == file_bytes(dir_ / "b.mp4"));
}

TEST_F(MediaWriter, NtscFrameRateIsStoredAsItsFraction) {
    const auto rgb = gradient_frames(3, 16, 16);
    const WrittenVideo w = write_mp4(dir_ / "v.mp4", VideoSpec{16, 16, 24000.0 / 1001}, rgb.data(), 3, nullptr);
    EXPECT_EQ(w.fps_num, 24000);
    EXPECT_EQ(w.fps_den, 1001);
    const StreamInfo v = probe_media(dir_ / "v.mp4").streams.at(0);  // a copy: the probe is a temporary
    EXPECT_EQ(v.fps_num, 24000);
    EXPECT_EQ(v.fps_den, 1001);
    EXPECT_EQ(v.packets, 3);
}

TEST_F(MediaWriter, WavRoundTripIsExactForS16) {
    constexpr int rate = 48000;
    constexpr std::int64_t n = 4800 * 3 + 17;  // not a multiple of the writer's chunk
    auto planar = tone_planar(n, rate);
    planar[5] = 1.5f;  // saturates to 32767
    planar[std::size_t(n + 6)] = -2.0f;  // saturates to -32768
    planar[7] = 1.0f;  // 32768 saturates to 32767
    const AudioClip clip{planar.data(), n, AudioSpec{rate, 2}, SampleLayout::planar};
    const WrittenAudio w = write_wav(dir_ / "audio.wav", clip, Overwrite::refuse, {{"comment", "ddo test"}});
    EXPECT_EQ(w.codec, "pcm_s16le");
    EXPECT_EQ(w.samples, n);
    EXPECT_EQ(w.file.sha256, ddo::file_sha256(dir_ / "audio.wav").value());
    EXPECT_EQ(w.file.size, fs::file_size(dir_ / "audio.wav"));
    // RIFF header + 2 bytes per sample per channel (+ the LIST/INFO chunk of the tag).
    EXPECT_GE(w.file.size, std::uint64_t(44 + n * 4));

    const MediaProbe probe = probe_media(dir_ / "audio.wav");
    EXPECT_EQ(probe.format, "wav");
    ASSERT_EQ(probe.streams.size(), 1u);
    EXPECT_EQ(probe.streams[0].codec, "pcm_s16le");
    EXPECT_EQ(probe.streams[0].channels, 2);
    EXPECT_EQ(probe.streams[0].sample_rate, rate);
    EXPECT_NEAR(probe.duration_s, double(n) / rate, 1e-6);

    const DecodedAudio d = decode_audio(dir_ / "audio.wav");
    ASSERT_EQ(d.frames, n);
    ASSERT_EQ(d.channels, 2);
    std::int64_t mismatches = 0;
    double max_err = 0;
    for (std::size_t i = 0; i < planar.size(); ++i) {
        const long q = std::clamp<long>(std::lrint(double(planar[i]) * 32768.0), -32768, 32767);
        const float expected = float(q) / 32768.0f;
        mismatches += d.samples[i] != expected;
        if (std::abs(planar[i]) < 1.0f) max_err = std::max(max_err, double(std::abs(d.samples[i] - planar[i])));
    }
    std::printf("[ roundtrip ] audio.wav: %lld of %zu samples differ from the s16 quantisation (tolerance 0); in "
                "[-1, 1): max abs error to the float input %.3g (half a step: %.3g)\n",
                (long long)mismatches, planar.size(), max_err, 0.5 / 32768);
    EXPECT_EQ(mismatches, 0);
    EXPECT_LE(max_err, 0.5 / 32768 + 1e-9);
    EXPECT_EQ(d.samples[5], 32767.0f / 32768.0f);
    EXPECT_EQ(d.samples[std::size_t(n + 6)], -1.0f);

    // The same samples interleaved: the same file.
    const auto inter = interleave(planar, n);
    const AudioClip clip_i{inter.data(), n, AudioSpec{rate, 2}, SampleLayout::interleaved};
    const WrittenAudio wi = write_wav(dir_ / "audio_i.wav", clip_i, Overwrite::refuse, {{"comment", "ddo test"}});
    EXPECT_EQ(wi.file.sha256, w.file.sha256);
}

TEST_F(MediaWriter, RefusesOddSizes) {
    const auto rgb = gradient_frames(2, 65, 48);
    const std::string m = message_of<ddo::UsageError>(
        [&] { write_mp4(dir_ / "odd.mp4", VideoSpec{65, 48, 24}, rgb.data(), 2, nullptr); });
    EXPECT_NE(m.find(dir_ / "odd.mp4"), std::string::npos) << m;
    EXPECT_NE(m.find("65x48"), std::string::npos) << m;
    EXPECT_NE(m.find("even width and height"), std::string::npos) << m;
    EXPECT_NE(m.find("64x48 or 66x48"), std::string::npos) << m;
    EXPECT_TRUE(entries().empty());
}

TEST_F(MediaWriter, RefusesNoFramesAndBadSettings) {
    const auto rgb = gradient_frames(1, 16, 16);
    std::string m = message_of<ddo::UsageError>([&] { write_mp4(dir_ / "v.mp4", VideoSpec{16, 16, 24}, rgb.data(), 0, nullptr); });
    EXPECT_NE(m.find("at least one frame"), std::string::npos) << m;
    m = message_of<ddo::UsageError>([&] { write_mp4(dir_ / "v.mp4", VideoSpec{16, 16, 0}, rgb.data(), 1, nullptr); });
    EXPECT_NE(m.find("frame rate"), std::string::npos) << m;
    VideoSpec bad_preset{16, 16, 24};
    bad_preset.preset = "quick";
    m = message_of<ddo::UsageError>([&] { write_mp4(dir_ / "v.mp4", bad_preset, rgb.data(), 1, nullptr); });
    EXPECT_NE(m.find("'quick' is not a libx264 preset"), std::string::npos) << m;
    const std::vector<float> tone = tone_planar(100, 44000);
    const AudioClip odd_rate{tone.data(), 100, AudioSpec{44000, 2}, SampleLayout::planar};
    m = message_of<ddo::UsageError>([&] { write_mp4(dir_ / "v.mp4", VideoSpec{16, 16, 24}, rgb.data(), 1, &odd_rate); });
    EXPECT_NE(m.find("AAC cannot store audio at 44000 Hz"), std::string::npos) << m;
    std::vector<float> nan_tone = tone_planar(100, 48000);
    nan_tone[100 + 42] = std::nanf("");
    const AudioClip nan_clip{nan_tone.data(), 100, AudioSpec{48000, 2}, SampleLayout::planar};
    m = message_of<ddo::UsageError>([&] { write_wav(dir_ / "a.wav", nan_clip); });
    EXPECT_NE(m.find("sample 42 of channel 1 is not finite"), std::string::npos) << m;
    const AudioClip empty{tone.data(), 0, AudioSpec{48000, 2}, SampleLayout::planar};
    m = message_of<ddo::UsageError>([&] { write_wav(dir_ / "a.wav", empty); });
    EXPECT_NE(m.find("no samples"), std::string::npos) << m;
    EXPECT_TRUE(entries().empty());
}

TEST_F(MediaWriter, ExistingFileIsKeptUnlessReplaceIsAsked) {
    const auto rgb = gradient_frames(2, 16, 16);
    const fs::path target = dir_ / "video.mp4";
    { std::ofstream(target) << "earlier output"; }
    const std::string m =
        message_of<ddo::UsageError>([&] { write_mp4(target, VideoSpec{16, 16, 24}, rgb.data(), 2, nullptr); });
    EXPECT_NE(m.find(target.string() + " already exists"), std::string::npos) << m;
    EXPECT_EQ(file_bytes(target), "earlier output");
    std::vector<float> tone = tone_planar(480, 48000);
    const AudioClip clip{tone.data(), 480, AudioSpec{48000, 2}, SampleLayout::planar};
    { std::ofstream(dir_ / "audio.wav") << "earlier audio"; }
    EXPECT_THROW(write_wav(dir_ / "audio.wav", clip), ddo::UsageError);
    EXPECT_EQ(file_bytes(dir_ / "audio.wav"), "earlier audio");
    EXPECT_EQ(entries(), (std::vector<std::string>{"audio.wav", "video.mp4"}));

    const WrittenVideo w = write_mp4(target, VideoSpec{16, 16, 24}, rgb.data(), 2, nullptr, Overwrite::replace);
    EXPECT_EQ(w.file.sha256, ddo::file_sha256(target).value());
    EXPECT_EQ(probe_media(target).streams.at(0).packets, 2);
    write_wav(dir_ / "audio.wav", clip, Overwrite::replace);
    EXPECT_EQ(probe_media(dir_ / "audio.wav").streams.at(0).codec, "pcm_s16le");
    EXPECT_EQ(entries(), (std::vector<std::string>{"audio.wav", "video.mp4"}));
}

TEST_F(MediaWriter, UnwritableDirectoryIsNamed) {
    const auto rgb = gradient_frames(1, 16, 16);
    // Permission bits do not stop root: there, a read-only file system (sysfs) stands in for the read-only directory.
    fs::path readonly = dir_ / "readonly";
    if (::geteuid() == 0) {
        readonly = "/sys";
    } else {
        fs::create_directories(readonly);
        fs::permissions(readonly, fs::perms::owner_read | fs::perms::owner_exec);
    }
    std::string m = message_of<ddo::RuntimeError>(
        [&] { write_mp4(readonly / "video.mp4", VideoSpec{16, 16, 24}, rgb.data(), 1, nullptr); });
    EXPECT_NE(m.find("video " + (readonly / "video.mp4").string()), std::string::npos) << m;
    EXPECT_NE(m.find("cannot create a temp file in " + readonly.string()), std::string::npos) << m;
    EXPECT_NE(m.find("check that the directory exists and is writable"), std::string::npos) << m;

    // A directory that cannot exist: a file stands where it should be.
    { std::ofstream(dir_ / "not_a_dir") << "x"; }
    std::vector<float> tone = tone_planar(480, 48000);
    const AudioClip clip{tone.data(), 480, AudioSpec{48000, 2}, SampleLayout::planar};
    m = message_of<ddo::RuntimeError>([&] { write_wav(dir_ / "not_a_dir" / "audio.wav", clip); });
    EXPECT_NE(m.find("audio " + (dir_ / "not_a_dir" / "audio.wav").string()), std::string::npos) << m;
    EXPECT_NE(m.find("Not a directory"), std::string::npos) << m;
}

// Mp4Writer (the incremental form a decoder streams into): frames added one at a time or in uneven batches give
// write_mp4's bytes for the same frames and audio (the audio packets interleave in presentation order either way);
// a writer dropped before finish() leaves no file and no temp file; finish() without a frame is refused.
TEST_F(MediaWriter, Mp4WriterInBatchesGivesWriteMp4sBytes) {
    const auto rgb = gradient_frames(kFrames, kWidth, kHeight);
    const std::int64_t n = samples_for_video(48000);
    const auto tone = tone_planar(n, 48000);
    const AudioClip clip{tone.data(), n, AudioSpec{48000, 2}, SampleLayout::planar};
    const VideoSpec spec{kWidth, kHeight, kFps};
    const MediaTags tags{{"comment", "ddo test"}};
    const WrittenVideo whole = write_mp4(dir_ / "whole.mp4", spec, rgb.data(), kFrames, &clip, Overwrite::refuse, tags);
    const std::size_t frame_bytes = std::size_t(kWidth) * kHeight * 3;
    for (const auto & batches : {std::vector<int>(kFrames, 1), std::vector<int>{3, 1, 8, 5}}) {
        const fs::path p = dir_ / ("batched_" + std::to_string(batches.size()) + ".mp4");
        Mp4Writer writer(p, spec, &clip, Overwrite::refuse, tags);
        int at = 0;
        for (int b : batches) {
            writer.add_frames(rgb.data() + std::size_t(at) * frame_bytes, b);
            at += b;
        }
        EXPECT_EQ(writer.frames(), kFrames);
        const WrittenVideo w = writer.finish();
        EXPECT_EQ(w.file.sha256, whole.file.sha256) << batches.size() << " batches";
        EXPECT_TRUE(file_bytes(p) == file_bytes(dir_ / "whole.mp4")) << batches.size() << " batches";
        EXPECT_EQ(w.frames, kFrames);
    }
    {
        Mp4Writer dropped(dir_ / "dropped.mp4", spec, &clip);
        dropped.add_frames(rgb.data(), 4);
    }
    EXPECT_FALSE(fs::exists(dir_ / "dropped.mp4"));
    {
        Mp4Writer empty(dir_ / "empty.mp4", spec, nullptr);
        EXPECT_NE(message_of<ddo::UsageError>([&] { empty.finish(); }).find("at least one frame"), std::string::npos);
    }
    EXPECT_FALSE(fs::exists(dir_ / "empty.mp4"));
    EXPECT_EQ(entries(), (std::vector<std::string>{"batched_17.mp4", "batched_4.mp4", "whole.mp4"}));
}
