// image_input_test: libddo_media's image input on files the test writes itself (no fixtures):
// - refusals (UsageError naming the file): a text file, an empty file, a GIF, an MP4 signature, a PNG cut short
//   (truncated), a PNG whose IHDR says 0x0, a PNG whose IHDR says 100000x100000 with no data (refused naming the size
//   and the limit, before any decoding: the process's peak RSS grows by less than 64 MiB, where the RGB buffer would
//   be 28 GiB), an image over a small limit, an animated PNG (acTL, 2 frames: "stills", "--image FILE@FRAME");
// - a valid stored PNG decodes to its pixels; the 7 orientations of apply_exif_orientation move a marked pixel where
//   PIL's transpose methods put it (image_input_parity_test checks them on PIL's own JPEGs);
// - h264_round_trip: crf 0 is the identity (no crop), crf 33 crops 33x21 to 32x20, the same input gives the same
//   bytes twice; uniform noise changes by a mean |diff| between 1 and 100 levels (it is incompressible and 4:2:0
//   discards most of its chroma), a smooth gradient by little (crf 33: mean < 3; crf 1: mean < 1.5, the yuv420p
//   conversions' rounding), the gradient with mild noise by more than the smooth one and less than 12 (measured
//   figures printed); a crf out of range and non-RGB input are refused.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/media/h264_round_trip.hpp"
#include "ddo/media/image_reader.hpp"

namespace fs = std::filesystem;
using namespace ddo::media;

namespace {

fs::path temp(const std::string & name) {
    return fs::temp_directory_path() / ("ddo_image_input_" + std::to_string(::getpid()) + "_" + name);
}

void write(const fs::path & p, const std::vector<std::uint8_t> & b) {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

void put32(std::vector<std::uint8_t> & b, std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
}

void chunk(std::vector<std::uint8_t> & png, const char * type, const std::vector<std::uint8_t> & data) {
    put32(png, std::uint32_t(data.size()));
    std::vector<std::uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    png.insert(png.end(), td.begin(), td.end());
    put32(png, std::uint32_t(crc32(0, td.data(), uInt(td.size()))));
}

// An 8-bit RGB PNG of w x h with `rgb` pixels (or only the header when rgb is empty); extra chunks before IDAT.
std::vector<std::uint8_t> png(std::uint32_t w, std::uint32_t h, const std::vector<std::uint8_t> & rgb,
                              const std::vector<std::pair<const char *, std::vector<std::uint8_t>>> & extra = {}) {
    std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    std::vector<std::uint8_t> ihdr;
    put32(ihdr, w);
    put32(ihdr, h);
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
    chunk(out, "IHDR", ihdr);
    for (const auto & [t, d] : extra) chunk(out, t, d);
    if (!rgb.empty()) {
        std::vector<std::uint8_t> raw;
        for (std::uint32_t y = 0; y < h; ++y) {
            raw.push_back(0);
            raw.insert(raw.end(), rgb.begin() + std::ptrdiff_t(y * w * 3), rgb.begin() + std::ptrdiff_t((y + 1) * w * 3));
        }
        uLongf n = compressBound(uLong(raw.size()));
        std::vector<std::uint8_t> z(n);
        compress(z.data(), &n, raw.data(), uLong(raw.size()));
        z.resize(n);
        chunk(out, "IDAT", z);
    }
    chunk(out, "IEND", {});
    return out;
}

std::string refusal(const fs::path & p, const ImageLimits & limits = {}) {
    try {
        read_image(p, limits);
    } catch (const ddo::UsageError & e) {
        return e.what();
    }
    return "(no UsageError)";
}

long peak_rss_kib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

std::vector<std::uint8_t> pattern(int w, int h) {
    std::vector<std::uint8_t> rgb(std::size_t(w) * std::size_t(h) * 3);
    for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = std::uint8_t((i * 37 + i / 7) & 0xff);
    return rgb;
}

TEST(ImageInput, ReadsAStoredPng) {
    const auto p = temp("ok.png");
    const auto rgb = pattern(7, 5);
    write(p, png(7, 5, rgb));
    const DecodedImage im = read_image(p);
    EXPECT_EQ(im.width, 7);
    EXPECT_EQ(im.height, 5);
    EXPECT_EQ(im.channels, 3);
    EXPECT_FALSE(im.has_alpha);
    EXPECT_EQ(im.format, "png");
    EXPECT_EQ(im.source_color, "rgb");
    EXPECT_EQ(im.orientation, 1);
    EXPECT_EQ(im.pixels, rgb);
    fs::remove(p);
}

TEST(ImageInput, RefusesWhatIsNoStillImage) {
    struct Case {
        std::string name;
        std::vector<std::uint8_t> bytes;
        std::string says;
    };
    const auto good = png(7, 5, pattern(7, 5));
    std::vector<std::uint8_t> truncated(good.begin(), good.begin() + std::ptrdiff_t(good.size() - 20));
    const std::string text = "hello, this is not an image\n";
    std::vector<std::uint8_t> mp4 = {0, 0, 0, 0x18, 'f', 't', 'y', 'p', 'i', 's', 'o', 'm', 0, 0, 2, 0};
    std::vector<std::uint8_t> actl;
    put32(actl, 2);
    put32(actl, 0);
    for (const Case & c : {Case{"text.png", {text.begin(), text.end()}, "not an image"},
                           Case{"empty.png", {}, "empty"},
                           Case{"anim.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0}, "GIF"},
                           Case{"clip.png", mp4, "condition images are stills"},
                           Case{"cut.png", truncated, "truncated"},
                           Case{"zero.png", png(0, 0, {}), "0x0"},
                           Case{"apng.png", png(7, 5, pattern(7, 5), {{"acTL", actl}}), "--image FILE@FRAME"}}) {
        const auto p = temp(c.name);
        write(p, c.bytes);
        const std::string msg = refusal(p);
        EXPECT_NE(msg.find(p.string()), std::string::npos) << c.name << ": " << msg;
        EXPECT_NE(msg.find(c.says), std::string::npos) << c.name << ": " << msg;
        fs::remove(p);
    }
    EXPECT_NE(refusal(temp("missing.png")).find("no such file"), std::string::npos);
}

TEST(ImageInput, RefusesAHugeHeaderBeforeDecoding) {
    const auto p = temp("huge.png");
    write(p, png(100000, 100000, {}));  // an IHDR and no pixel data: a 28 GiB RGB buffer if anything allocated it
    const long before = peak_rss_kib();
    const std::string msg = refusal(p);
    const long grown_kib = peak_rss_kib() - before;
    std::cout << "[ measured  ] " << msg << "\n[ measured  ] peak RSS grew by " << grown_kib << " KiB\n";
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("100000x100000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16384x16384"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not decoded"), std::string::npos) << msg;
    EXPECT_LT(grown_kib, 64 * 1024);
    // A real image over a small limit is refused the same way; under it, it decodes.
    write(p, png(40, 30, pattern(40, 30)));
    ImageLimits small;
    small.max_width = 32;
    EXPECT_NE(refusal(p, small).find("40x30"), std::string::npos);
    small.max_width = 64;
    small.max_pixels = 1000;
    EXPECT_NE(refusal(p, small).find("1000 pixels"), std::string::npos);
    EXPECT_EQ(read_image(p).width, 40);
    fs::remove(p);
}

TEST(ImageInput, ExifOrientationAsPilTranspose) {
    // A 3x2 image with pixel (x=2, y=0) marked; where PIL's exif_transpose puts it for each orientation (w x h after).
    struct Case {
        int orientation, w, h, x, y;
    };
    for (const Case & c : {Case{2, 3, 2, 0, 0}, Case{3, 3, 2, 0, 1}, Case{4, 3, 2, 2, 1}, Case{5, 2, 3, 0, 2},
                           Case{6, 2, 3, 1, 2}, Case{7, 2, 3, 1, 0}, Case{8, 2, 3, 0, 0}}) {
        DecodedImage im;
        im.width = 3, im.height = 2, im.channels = 3;
        im.pixels.assign(18, 0);
        im.pixels[2 * 3] = 255;
        apply_exif_orientation(im, c.orientation);
        ASSERT_EQ(im.width, c.w) << c.orientation;
        ASSERT_EQ(im.height, c.h) << c.orientation;
        EXPECT_EQ(im.pixels[(std::size_t(c.y) * std::size_t(c.w) + std::size_t(c.x)) * 3], 255) << c.orientation;
        EXPECT_EQ(im.orientation, c.orientation);
    }
}

Image8 image(int w, int h, bool noisy) {
    Image8 im;
    im.width = w, im.height = h, im.channels = 3;
    im.pixels.resize(std::size_t(w) * std::size_t(h) * 3);
    std::mt19937 rng(7);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c)
                im.pixels[(std::size_t(y) * std::size_t(w) + std::size_t(x)) * 3 + std::size_t(c)] =
                    noisy ? std::uint8_t(rng() & 0xff) : std::uint8_t(40 + x * 150 / w + y * 30 / h + c * 10);
    return im;
}

std::pair<double, int> difference(const Image8 & a, const Image8 & b) {
    double sum = 0;
    int mx = 0;
    for (int y = 0; y < b.height; ++y)
        for (int x = 0; x < b.width * 3; ++x) {
            const int d = std::abs(int(a.pixels[std::size_t(y) * std::size_t(a.width) * 3 + std::size_t(x)]) -
                                   int(b.pixels[std::size_t(y) * std::size_t(b.width) * 3 + std::size_t(x)]));
            sum += d;
            mx = std::max(mx, d);
        }
    return {sum / (double(b.width) * b.height * 3), mx};
}

TEST(H264RoundTrip, AsTheReference) {
    const Image8 noisy = image(33, 21, true);
    const Image8 same = h264_round_trip(noisy, 0);
    EXPECT_EQ(same.width, 33);
    EXPECT_EQ(same.pixels, noisy.pixels);
    const Image8 a = h264_round_trip(noisy, 33), b = h264_round_trip(noisy, 33);
    EXPECT_EQ(a.width, 32);
    EXPECT_EQ(a.height, 20);
    EXPECT_EQ(a.pixels, b.pixels) << "the same input must give the same bytes";
    const auto [mean, mx] = difference(noisy, a);
    std::cout << "[ measured  ] crf 33, uniform noise 33x21: mean |diff| " << mean << ", max " << mx << "\n";
    EXPECT_GT(mean, 1.0);
    EXPECT_LT(mean, 100.0);
    const Image8 smooth = image(64, 48, false);
    const auto [smean, smx] = difference(smooth, h264_round_trip(smooth, 33));
    const auto [lmean, lmx] = difference(smooth, h264_round_trip(smooth, 1));
    std::cout << "[ measured  ] crf 33, gradient 64x48: mean |diff| " << smean << ", max " << smx
              << "; crf 1: mean " << lmean << ", max " << lmx << "\n";
    EXPECT_LT(smean, 3.0);
    EXPECT_LT(lmean, 1.5);
    EXPECT_LE(lmean, smean);
    // A photo-like frame: the gradient with mild noise (uniform +-12 levels).
    Image8 grainy = smooth;
    std::mt19937 rng(11);
    for (auto & v : grainy.pixels) v = std::uint8_t(std::clamp(int(v) + int(rng() % 25) - 12, 0, 255));
    const auto [gmean, gmx] = difference(grainy, h264_round_trip(grainy, 33));
    std::cout << "[ measured  ] crf 33, gradient + uniform noise +-12, 64x48: mean |diff| " << gmean << ", max " << gmx << "\n";
    EXPECT_GT(gmean, smean);
    EXPECT_LT(gmean, 12.0);
    EXPECT_THROW(h264_round_trip(noisy, 52), ddo::UsageError);
    Image8 rgba = noisy;
    rgba.channels = 4;
    EXPECT_THROW(h264_round_trip(rgba, 33), ddo::UsageError);
}

}  // namespace
