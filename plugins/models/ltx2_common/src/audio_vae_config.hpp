// LTX-2 audio VAE config: audio_vae/config.json of a diffusers LTX-2 checkpoint (AutoencoderKLLTX2Audio, reference
// diffusers/models/autoencoders/autoencoder_kl_ltx2_audio.py; models.md §5.10). Only what the decoder and the
// pipeline's latent packing use is kept; values the decoder does not implement are refused with UsageError.
// Also AudioTensorSpec, the (name, shape) of one checkpoint tensor, shared by the audio VAE and the vocoders.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::ltx2 {

// One checkpoint tensor the math reads: its diffusers name and shape.
struct AudioTensorSpec {
    std::string name;
    std::vector<int64_t> shape;
};

struct AudioVaeConfig {
    // Time and mel compression of the latent (diffusers' LATENT_DOWNSAMPLE_FACTOR).
    static constexpr int64_t kLatentDownsample = 4;

    int64_t base_channels = 128;
    int64_t output_channels = 2;
    std::vector<int64_t> ch_mult{1, 2, 4};
    int64_t num_res_blocks = 2;
    int64_t latent_channels = 8;
    int64_t mel_bins = 64;        // decoded mel bins (crop / zero-pad target)
    int64_t sample_rate = 16000;  // of the waveform the mel describes
    int64_t mel_hop_length = 160;

    // Channels of decoder level `level` (0 = the finest, last decoded).
    int64_t level_channels(std::size_t level) const { return base_channels * ch_mult.at(level); }
    int64_t latent_mel_bins() const { return mel_bins / kLatentDownsample; }
    // Feature width of the packed latents [B, L, latent_channels * latent_mel_bins] (= latents_mean's length).
    int64_t packed_features() const { return latent_channels * latent_mel_bins(); }
    // Mel frames decoded from `latent_frames` latent frames (causal: 4L - 3, at least 1).
    static int64_t mel_frames(int64_t latent_frames) {
        return std::max<int64_t>(latent_frames * kLatentDownsample - (kLatentDownsample - 1), 1);
    }

    // `file` names the source in messages. Missing keys take diffusers' defaults; unsupported values throw
    // UsageError naming file and key.
    static AudioVaeConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    // Reads <component_dir>/config.json.
    static AudioVaeConfig from_dir(const std::filesystem::path & component_dir);
};

}  // namespace ddo::ltx2
