// LTX-2.3 vocoder with bandwidth extension: mel [B, C, T, M] -> 48 kHz waveform. Reference:
// diffusers/pipelines/ltx2/vocoder.py (LTX2VocoderWithBWE, MelSTFT, CausalSTFT, UpSample1d(window_type="hann"));
// models.md §5.11. Stage 1 (keys "vocoder.*") is a HiFi-GAN generator at input_sampling_rate (16 kHz); its output,
// zero-padded to a multiple of hop_length, gives a causal STFT log-mel (buffers mel_stft.stft_fn.forward_basis and
// mel_stft.mel_basis, read from the checkpoint); the second generator ("bwe_generator.*") predicts a residual that
// is added to the stage-1 waveform resampled x(output/input) by a Hann-windowed sinc (filter computed here: a
// non-persistent buffer of the reference); clamp to [-1, 1]; crop to samples * output / input.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "audio_vae_config.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "vocoder.hpp"
#include "vocoder_config.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// Every tensor the BWE vocoder reads (mel_stft.stft_fn.inverse_basis is in the checkpoint but unused).
std::vector<AudioTensorSpec> vocoder_bwe_specs(const VocoderBweConfig & config);
// Checks every spec against the checkpoint header: RuntimeError naming the tensor and the file.
void validate_vocoder_bwe(const model::TensorFile & file, const VocoderBweConfig & config);
// Execution groups in execution order: the stage-1 generator's ("vocoder.conv_in", "vocoder.stage.<i>",
// "vocoder.conv_out"), "mel_stft", then the extender's ("bwe_generator.conv_in", ...).
std::vector<model::GroupSpec> vocoder_bwe_groups(const VocoderBweConfig & config);

// The Hann-windowed sinc filter [1, 1, 2*7*ratio + 1] of UpSample1d(ratio, window_type="hann") (rolloff 0.99,
// lowpass width 6), fp32 on the CPU, computed with the reference's float32 operations.
at::Tensor hann_sinc_resample_filter(int64_t ratio);

class VocoderWithBwe {
public:
    explicit VocoderWithBwe(VocoderBweConfig config);
    const VocoderBweConfig & config() const noexcept { return config_; }
    // Of the waveform forward() returns (config.json "output_sampling_rate"; 48000 for LTX-2.3).
    int64_t output_sampling_rate() const noexcept { return config_.output_sampling_rate; }
    // The stage-1 generator (keys "vocoder.*", output at input_sampling_rate).
    const Vocoder & stage1() const noexcept { return vocoder_; }

    // mel: [B, C, T, M] with C*M = in_channels. Returns [B, out_channels, N * output / input] in w's dtype, N the
    // stage-1 samples (T * prod(upsample_factors)). `w` is borrowed for the call.
    at::Tensor forward(Weights & w, const at::Tensor & mel) const;
    // MelSTFT's causal log-mel of waveform [B, C, N] (N a multiple of hop_length): [B, C, num_mel_channels, N / hop].
    at::Tensor log_mel(Weights & w, const at::Tensor & waveform) const;

private:
    VocoderBweConfig config_;
    Vocoder vocoder_;
    Vocoder bwe_;
    at::Tensor resample_filter_;  // hann_sinc_resample_filter(resample_ratio()), CPU fp32
};

}  // namespace ddo::ltx2
