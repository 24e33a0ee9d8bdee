// LTX-2 vocoder configs: vocoder/config.json of a diffusers LTX-2 checkpoint. Reference:
// diffusers/pipelines/ltx2/vocoder.py: LTX2Vocoder (LTX-2.0, HiFi-GAN, 24 kHz) and LTX2VocoderWithBWE (LTX-2.3+:
// a 16 kHz generator, a causal STFT log-mel and a second generator that extends the band to 48 kHz); models.md §5.11.
// The class is the config's "_class_name" (written by save_pretrained; diffusers' from_pretrained and the
// pipeline's model_index.json entry ["ltx2", "<class>"] pick the class by the same name). Missing keys take the
// defaults of that class's __init__; values the C++ code does not implement are refused with UsageError.
// Note [LTX-2 vocoder class detection] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::ltx2 {

enum class VocoderKind {
    hifigan,  // LTX2Vocoder
    bwe,      // LTX2VocoderWithBWE
};

enum class VocoderActivation {
    leaky_relu,  // F.leaky_relu before each upsampler, nn.LeakyReLU in the ResBlocks
    snake,       // SnakeBeta(use_beta=false) in the ResBlocks; act_out is anti-aliased SnakeBeta
    snakebeta,   // SnakeBeta everywhere; act_out anti-aliased
};

enum class VocoderFinalActivation { none, tanh, clamp };

// One HiFi-GAN generator (LTX2Vocoder; also each half of LTX2VocoderWithBWE).
struct VocoderConfig {
    int64_t in_channels = 128;  // = mel channels * mel bins
    int64_t hidden_channels = 1024;
    int64_t out_channels = 2;
    std::vector<int64_t> upsample_kernel_sizes{16, 15, 8, 4, 4};
    std::vector<int64_t> upsample_factors{6, 5, 2, 2, 2};
    std::vector<int64_t> resnet_kernel_sizes{3, 7, 11};
    std::vector<std::vector<int64_t>> resnet_dilations{{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
    VocoderActivation act_fn = VocoderActivation::leaky_relu;
    double leaky_relu_negative_slope = 0.1;
    bool antialias = false;  // anti-aliased (up x ratio, act, down) activations in the ResBlocks
    int64_t antialias_ratio = 2;
    int64_t antialias_kernel_size = 12;
    VocoderFinalActivation final_act_fn = VocoderFinalActivation::tanh;
    bool final_bias = true;
    int64_t output_sampling_rate = 24000;

    std::size_t stages() const { return upsample_factors.size(); }
    // Channels after upsampler `stage` (hidden / 2^(stage+1)).
    int64_t stage_channels(std::size_t stage) const { return hidden_channels >> (stage + 1); }
    // Waveform samples per mel frame (product of the upsample factors).
    int64_t upsample_factor() const;
    bool snake() const { return act_fn != VocoderActivation::leaky_relu; }

    // LTX2Vocoder's keys ("_class_name", when present, must be LTX2Vocoder). `file` names the source in messages.
    static VocoderConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
};

// LTX2VocoderWithBWE: `vocoder` (unprefixed keys, output at input_sampling_rate) then `bwe` (bwe_* keys, output at
// output_sampling_rate), the causal STFT mel between them.
struct VocoderBweConfig {
    VocoderConfig vocoder;
    VocoderConfig bwe;
    int64_t filter_length = 512;
    int64_t hop_length = 80;
    int64_t window_length = 512;
    int64_t num_mel_channels = 64;
    int64_t input_sampling_rate = 16000;
    int64_t output_sampling_rate = 48000;

    int64_t n_freqs() const { return filter_length / 2 + 1; }
    // Of the Hann-sinc resampler of the skip path (output / input sampling rate).
    int64_t resample_ratio() const { return output_sampling_rate / input_sampling_rate; }

    // "_class_name", when present, must be LTX2VocoderWithBWE.
    static VocoderBweConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
};

// The class named by "_class_name": UsageError naming file and key for a class that is not a LTX-2 vocoder.
VocoderKind vocoder_kind(const nlohmann::json & j, const std::filesystem::path & file);
// <component_dir>/config.json (RuntimeError naming the file when unreadable).
nlohmann::json read_vocoder_config(const std::filesystem::path & component_dir);

}  // namespace ddo::ltx2
