// LTX-2 HiFi-GAN vocoder: mel [B, C, T, M] -> waveform [B, out_channels, T * prod(upsample_factors)]. Reference:
// diffusers/pipelines/ltx2/vocoder.py (LTX2Vocoder, ResBlock, SnakeBeta, AntiAliasAct1d, UpSample1d / DownSample1d
// with Kaiser-sinc filters); models.md §5.11. LTX-2.0 ships it as vocoder/ (leaky ReLU, tanh, 24 kHz); LTX-2.3's
// LTX2VocoderWithBWE (vocoder_bwe.hpp) runs two of them (SnakeBeta, anti-aliased, no final activation) under the
// key prefixes "vocoder." and "bwe_generator.".
//
// Weights are read through ltx2::Weights inside the scopes named by vocoder_groups(); the Kaiser-sinc filters of
// the anti-aliased activations are persistent buffers of the checkpoint and are read from it like the weights.
// Note [diffusers vocoder quirks reproduced], Note [LTX-2 audio buffers] in docs/architecture.md.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "audio_vae_config.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "vocoder_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// Every tensor the generator reads, names prefixed by `prefix` ("" for an LTX2Vocoder checkpoint).
std::vector<AudioTensorSpec> vocoder_specs(const VocoderConfig & config, const std::string & prefix = "");
// Checks every spec against the checkpoint header: RuntimeError naming the tensor and the file.
void validate_vocoder(const model::TensorFile & file, const VocoderConfig & config);
// Execution groups, in execution order: "<prefix>conv_in", "<prefix>stage.<i>" (upsampler i and its ResBlocks)
// for every upsampler, "<prefix>conv_out" (act_out and conv_out).
std::vector<model::GroupSpec> vocoder_groups(const VocoderConfig & config, const std::string & prefix = "");

class Vocoder {
public:
    // prefix: the generator's key prefix in the checkpoint ("" for vocoder/ of LTX-2.0).
    explicit Vocoder(VocoderConfig config, std::string prefix = "");
    const VocoderConfig & config() const noexcept { return config_; }
    // Of the waveform forward() returns (config.json "output_sampling_rate"; 24000 for LTX-2.0).
    int64_t output_sampling_rate() const noexcept { return config_.output_sampling_rate; }

    // mel: [B, C, T, M] with C*M = in_channels (the audio VAE's output; moved to w's device and dtype). Returns the
    // waveform [B, out_channels, T * upsample_factor()] in w's dtype. `w` is borrowed for the call.
    at::Tensor forward(Weights & w, const at::Tensor & mel) const;

private:
    VocoderConfig config_;
    std::string prefix_;
};

}  // namespace ddo::ltx2
