// image_input_parity_test: ddo's image input against Pillow 13 and diffusers 0.42.1 (tools/reference/
// image_input_fixtures.py; fixtures in the build tree, skipped when missing).
// - read_image: every PNG layout (8-bit gray, gray+alpha, RGB, RGBA, 1-bit, palette with and without tRNS, 16-bit
//   RGB/RGBA/gray+alpha) and lossless WebP (RGB, RGBA) equal PIL's pixels (exif_transpose, convert RGB/RGBA) byte for
//   byte; 16-bit gray equals the most significant byte (PIL's convert clips at 255: ddo differs on purpose). JPEG
//   and lossy WebP are within the stated max |difference| (libswscale's chroma upsampling is not libjpeg-turbo's or
//   libwebp's; measured figures printed); EXIF orientations 2..8 (JPEG) and 6 (PNG eXIf) give PIL's geometry and
//   pixels; format, bit depth and orientation are recorded.
// - resize_like_pil: 210 cases (random and photo-like, L/RGB/RGBA, up and down, non-integer ratios, each filter)
//   equal Image.resize byte for byte.
// - resize_like_vae_image_processor then x / 255 * 2 - 1: equals VideoProcessor.preprocess's float32 tensor exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/media/image_reader.hpp"
#include "ddo/media/image_resize.hpp"

namespace fs = std::filesystem;
using namespace ddo::media;

namespace {

const fs::path kDir = IMAGE_INPUT_FIXTURE_DIR;

std::vector<std::uint8_t> bytes_of(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

class ImageInput : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json"))
            GTEST_SKIP() << (kDir / "reference.json").string() << " missing: build target image_input_fixtures";
        std::ifstream in(kDir / "reference.json");
        ref = nlohmann::json::parse(in);
        std::cout << "[ reference ] Pillow " << ref["pillow"].get<std::string>() << ", diffusers "
                  << ref["diffusers"].get<std::string>() << " (seed " << ref["seed"] << ")\n";
    }
    nlohmann::json ref;
};

TEST_F(ImageInput, ReadImageMatchesPil) {
    int checked = 0;
    for (const auto & c : ref["decode"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        const DecodedImage im = read_image(kDir / "decode" / c["file"].get<std::string>());
        const auto want = bytes_of(kDir / "decode" / (name + ".rgb"));
        ASSERT_EQ(im.width, c["width"].get<int>());
        ASSERT_EQ(im.height, c["height"].get<int>());
        ASSERT_EQ(im.channels, c["channels"].get<int>());
        EXPECT_EQ(im.has_alpha, im.channels == 4);
        EXPECT_EQ(im.format, c["format"].get<std::string>());
        EXPECT_EQ(im.bit_depth, c["bit_depth"].get<int>() == 16 ? 16 : im.bit_depth);
        EXPECT_EQ(im.orientation, c.value("orientation", 1));
        ASSERT_EQ(im.pixels.size(), want.size());
        int max_diff = 0;
        double sum = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
            const int d = std::abs(int(im.pixels[i]) - int(want[i]));
            max_diff = std::max(max_diff, d);
            sum += d;
        }
        std::cout << "[ parity    ] read_image " << name << " (" << im.format << ", " << im.source_color << ", "
                  << im.bit_depth << "-bit, orientation " << im.orientation << "): max |diff| " << max_diff
                  << ", mean " << sum / double(want.size()) << "\n";
        if (c["exact"].get<bool>()) EXPECT_EQ(max_diff, 0);
        else EXPECT_LE(max_diff, c["max_abs_tolerance"].get<int>());
        ++checked;
    }
    EXPECT_GE(checked, 25);
}

TEST_F(ImageInput, ResizeMatchesPilExactly) {
    int checked = 0, failed = 0;
    for (const auto & c : ref["resize"]) {
        Image8 in;
        in.width = c["width"], in.height = c["height"], in.channels = c["channels"];
        in.pixels = bytes_of(kDir / "resize" / c["input"].get<std::string>());
        const auto want = bytes_of(kDir / "resize" / (c["name"].get<std::string>() + ".out"));
        const Image8 got = resize_like_pil(in, c["out_width"], c["out_height"],
                                           parse_resample_filter(c["filter"], "fixture"));
        ASSERT_EQ(got.pixels.size(), want.size()) << c["name"];
        int max_diff = 0;
        for (std::size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::abs(int(got.pixels[i]) - int(want[i])));
        if (max_diff != 0) {
            ++failed;
            ADD_FAILURE() << c["name"].get<std::string>() << ": max |diff| " << max_diff;
        }
        ++checked;
    }
    std::cout << "[ parity    ] resize_like_pil: " << checked - failed << " of " << checked << " cases byte-exact\n";
    EXPECT_GE(checked, 200);
}

TEST_F(ImageInput, VaeImageProcessorResizeAndNormalise) {
    for (const auto & c : ref["vae"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        Image8 in;
        in.width = c["width"], in.height = c["height"], in.channels = 3;
        in.pixels = bytes_of(kDir / "vae" / (name + ".in"));
        const Image8 got = resize_like_vae_image_processor(in, c["request_height"], c["request_width"],
                                                           c["vae_scale_factor"], c["resample"]);
        const auto shape = c["out_shape"];
        ASSERT_EQ(got.height, shape[2].get<int>());
        ASSERT_EQ(got.width, shape[3].get<int>());
        const auto raw = bytes_of(kDir / "vae" / (name + ".out"));
        ASSERT_EQ(raw.size(), std::size_t(got.width) * std::size_t(got.height) * 3 * sizeof(float));
        const auto * want = reinterpret_cast<const float *>(raw.data());
        int mismatched = 0;
        for (int ch = 0; ch < 3; ++ch)
            for (int y = 0; y < got.height; ++y)
                for (int x = 0; x < got.width; ++x) {
                    const float v = float(got.pixels[(std::size_t(y) * std::size_t(got.width) + std::size_t(x)) * 3 + std::size_t(ch)]);
                    const float norm = 2.0f * (v / 255.0f) - 1.0f;
                    const float w = want[(std::size_t(ch) * std::size_t(got.height) + std::size_t(y)) * std::size_t(got.width) + std::size_t(x)];
                    mismatched += norm != w;
                }
        std::cout << "[ parity    ] VideoProcessor.preprocess " << name << " (" << c["resample"].get<std::string>()
                  << ", " << got.width << "x" << got.height << "): " << mismatched << " values differ\n";
        EXPECT_EQ(mismatched, 0);
    }
}

// A JPEG and a WebP cut in half (from the fixtures) are refused as truncated, naming the file; a JPEG with bytes
// appended after its EOI (a camera trailer) still reads.
TEST_F(ImageInput, TruncatedJpegAndWebpAreRefused) {
    for (const char * name : {"jpeg_420.jpg", "webp_lossy.webp", "webp_lossless.webp"}) {
        auto bytes = bytes_of(kDir / "decode" / name);
        bytes.resize(bytes.size() / 2);
        const fs::path p = fs::temp_directory_path() / ("ddo_truncated_" + std::to_string(::getpid()) + "_" + name);
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
        std::string msg = "(no UsageError)";
        try {
            read_image(p);
        } catch (const ddo::UsageError & e) {
            msg = e.what();
        }
        EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
        EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
        fs::remove(p);
    }
    auto bytes = bytes_of(kDir / "decode" / "jpeg_420.jpg");
    for (char c : std::string("TRAILER\xff\x00 some camera data")) bytes.push_back(std::uint8_t(c));
    const fs::path p = fs::temp_directory_path() / ("ddo_trailer_" + std::to_string(::getpid()) + ".jpg");
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
    EXPECT_EQ(read_image(p).width, 96);
    fs::remove(p);
}

}  // namespace
