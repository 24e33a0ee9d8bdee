// LTX-2 audio VAE decoder (mel-spectrogram VAE, 2D, causal along time) and the pipeline's audio latent packing.
// Reference: diffusers/models/autoencoders/autoencoder_kl_ltx2_audio.py (LTX2AudioDecoder, LTX2AudioCausalConv2d,
// LTX2AudioPixelNorm, LTX2AudioResnetBlock, LTX2AudioUpsample) and pipelines/ltx2/pipeline_ltx2.py
// (_denormalize_audio_latents, _unpack_audio_latents, _pack_audio_latents); models.md §5.10, §5.12 steps 7-8.
//
//   packed [B, L, C*M] --denormalize_audio_latents--> --unpack_audio_latents--> [B, C, L, M]
//   --AudioVaeDecoder::decode--> mel [B, output_channels, 4L-3, mel_bins]
//
// Weights are read through ltx2::Weights inside the scopes named by audio_vae_decoder_groups().
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "audio_vae_config.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {

// Every tensor the decoder and the de-normalisation read (decoder.*, latents_mean, latents_std), in execution order.
std::vector<AudioTensorSpec> audio_vae_decoder_specs(const AudioVaeConfig & config);
// Checks every spec against the checkpoint header (present, shape, floating dtype): RuntimeError naming the tensor
// and the file.
void validate_audio_vae_decoder(const model::TensorFile & file, const AudioVaeConfig & config);
// Execution groups, in execution order: "latents_stats" (latents_mean/std), "decoder.conv_in", "decoder.mid",
// "decoder.up.<level>" for level = n-1 .. 0 (its resnets and upsampler), "decoder.conv_out" (norm_out has no weights).
std::vector<model::GroupSpec> audio_vae_decoder_groups(const AudioVaeConfig & config);

// [B, C, L, M] -> [B, L, C*M] (feature = c*M + m), as the pipeline packs audio latents for the transformer.
at::Tensor pack_audio_latents(const at::Tensor & latents);
// [B, L, C*M] -> [B, C, L, M] with M = latent_mel_bins (AudioVaeConfig::latent_mel_bins()).
at::Tensor unpack_audio_latents(const at::Tensor & packed, int64_t latent_mel_bins);
// packed * latents_std + latents_mean on the packed [B, L, C*M] features, in packed's dtype and on its device (the
// pipeline de-normalises its fp32 latents before unpacking). `w` is borrowed for the call (scope "latents_stats").
at::Tensor denormalize_audio_latents(Weights & w, const at::Tensor & packed);
// The inverse, (packed - latents_mean) / latents_std (_normalize_audio_latents: a two-stage run's stage 2 takes the
// stage-1 audio de-normalised and normalises it again, as the reference's round trip does).
at::Tensor normalize_audio_latents(Weights & w, const at::Tensor & packed);

class AudioVaeDecoder {
public:
    explicit AudioVaeDecoder(AudioVaeConfig config);
    const AudioVaeConfig & config() const noexcept { return config_; }

    // latents: [B, latent_channels, L, M] already de-normalised (moved to w's device and dtype). Returns the mel
    // spectrogram [B, output_channels, max(4L-3, 1), mel_bins] in w's dtype: the decoded [B, C, 4L-3, 4M] cropped
    // and zero-padded to mel_bins as the reference does. `w` is borrowed for the call.
    at::Tensor decode(Weights & w, const at::Tensor & latents) const;

private:
    AudioVaeConfig config_;
};

}  // namespace ddo::ltx2
