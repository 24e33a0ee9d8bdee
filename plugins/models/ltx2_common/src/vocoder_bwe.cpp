// LTX-2.3 vocoder with bandwidth extension (reference: see vocoder_bwe.hpp).
#include "vocoder_bwe.hpp"

#include <cmath>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kLogMelFloor = 1e-5;  // MelSTFT: log(clamp(mel, min=1e-5))
constexpr double kRolloff = 0.99;      // UpSample1d(window_type="hann")
constexpr int64_t kLowpassWidth = 6;

int64_t hann_width() { return static_cast<int64_t>(std::ceil(kLowpassWidth / kRolloff)); }

const std::string kStage1 = "vocoder.";
const std::string kBwe = "bwe_generator.";
const std::string kForwardBasis = "mel_stft.stft_fn.forward_basis";
const std::string kMelBasis = "mel_stft.mel_basis";

std::vector<AudioTensorSpec> mel_specs(const VocoderBweConfig & c) {
    return {{kForwardBasis, {2 * c.n_freqs(), 1, c.filter_length}}, {kMelBasis, {c.num_mel_channels, c.n_freqs()}}};
}

}  // namespace

std::vector<AudioTensorSpec> vocoder_bwe_specs(const VocoderBweConfig & config) {
    auto all = vocoder_specs(config.vocoder, kStage1);
    const auto mel = mel_specs(config);
    all.insert(all.end(), mel.begin(), mel.end());
    const auto bwe = vocoder_specs(config.bwe, kBwe);
    all.insert(all.end(), bwe.begin(), bwe.end());
    return all;
}

void validate_vocoder_bwe(const model::TensorFile & file, const VocoderBweConfig & config) {
    for (const auto & s : vocoder_bwe_specs(config)) file.check(s.name, s.shape);
}

std::vector<model::GroupSpec> vocoder_bwe_groups(const VocoderBweConfig & config) {
    auto groups = vocoder_groups(config.vocoder, kStage1);
    model::GroupSpec mel{"mel_stft", {}};
    for (const auto & s : mel_specs(config)) mel.tensors.push_back(s.name);
    groups.push_back(std::move(mel));
    for (auto & g : vocoder_groups(config.bwe, kBwe)) groups.push_back(std::move(g));
    return groups;
}

at::Tensor hann_sinc_resample_filter(int64_t ratio) {
    const int64_t width = hann_width();
    const int64_t kernel = 2 * width * ratio + 1;
    // The reference's float32 sequence: (arange(K) / ratio - width) * rolloff, clamp, cos(t * pi / w / 2) ** 2,
    // sinc(t) * window * rolloff / ratio.
    const auto t = (at::arange(kernel, at::kLong).div(ratio) - width) * kRolloff;
    const auto clamped = t.clamp(-kLowpassWidth, kLowpassWidth);
    const auto window = at::cos(clamped * M_PI / kLowpassWidth / 2).pow(2);
    return (at::sinc(t) * window * kRolloff / ratio).view({1, 1, kernel});
}

VocoderWithBwe::VocoderWithBwe(VocoderBweConfig config)
    : config_(std::move(config)),
      vocoder_(config_.vocoder, kStage1),
      bwe_(config_.bwe, kBwe),
      resample_filter_(hann_sinc_resample_filter(config_.resample_ratio())) {}

at::Tensor VocoderWithBwe::log_mel(Weights & w, const at::Tensor & waveform) const {
    const auto & c = config_;
    if (waveform.dim() != 3 || waveform.size(2) % c.hop_length != 0) {
        throw RuntimeError("vocoder BWE: log_mel needs a waveform [B, C, N] with N a multiple of hop_length " +
                           std::to_string(c.hop_length) + ", got " + model::shape_str(waveform.sizes()));
    }
    Weights::Scope s(w, "mel_stft");
    const int64_t channels = waveform.size(1);
    // CausalSTFT: left-only zero pad of window - hop, conv with the windowed DFT basis at stride hop.
    auto x = waveform.flatten(0, 1).unsqueeze(1);
    x = at::constant_pad_nd(x, {std::max<int64_t>(0, c.window_length - c.hop_length), 0}, 0.0);
    const auto spec = at::conv1d(x, w.get(kForwardBasis), std::nullopt, at::IntArrayRef{c.hop_length});
    const int64_t n_freqs = spec.size(1) / 2;
    const auto real = spec.slice(1, 0, n_freqs), imag = spec.slice(1, n_freqs);
    const auto magnitude = at::sqrt(real.pow(2) + imag.pow(2));
    const auto mel = at::matmul(w.get(kMelBasis).to(magnitude.scalar_type()), magnitude);
    return at::log(at::clamp_min(mel, kLogMelFloor)).unflatten(0, {-1, channels});
}

at::Tensor VocoderWithBwe::forward(Weights & w, const at::Tensor & mel) const {
    const auto & c = config_;
    auto x = vocoder_.forward(w, mel);  // [B, C, N] at input_sampling_rate
    const int64_t samples = x.size(2);
    if (const int64_t rem = samples % c.hop_length; rem != 0) x = at::constant_pad_nd(x, {0, c.hop_length - rem}, 0.0);
    const auto residual = bwe_.forward(w, log_mel(w, x).transpose(2, 3));  // [B, C, frames, mels] in
    // UpSample1d(ratio, "hann"): replicate pad, depthwise transposed conv at stride ratio, times ratio, crop.
    const int64_t ratio = c.resample_ratio(), width = hann_width();
    const int64_t kernel = resample_filter_.size(2), pad_left = 2 * width * ratio, pad_right = kernel - ratio;
    const int64_t channels = x.size(1);
    const auto filter = resample_filter_.to(x.device(), x.scalar_type()).expand({channels, -1, -1});
    auto skip = at::conv_transpose1d(at::replication_pad1d(x, {width, width}), filter, std::nullopt,
                                     at::IntArrayRef{ratio}, at::IntArrayRef{0}, at::IntArrayRef{0}, channels) *
                ratio;
    skip = skip.slice(2, pad_left, skip.size(2) - pad_right);
    const auto wave = at::clamp(residual + skip, -1, 1);
    return wave.slice(2, 0, samples * c.output_sampling_rate / c.input_sampling_rate);
}

}  // namespace ddo::ltx2
