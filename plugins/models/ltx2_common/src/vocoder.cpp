// LTX-2 HiFi-GAN vocoder (reference: see vocoder.hpp).
#include "vocoder.hpp"

#include <optional>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kSnakeEps = 1e-9;        // SnakeBeta eps
constexpr double kActOutSlope = 0.01;     // act_out = nn.LeakyReLU() (default slope, not the configured one)
constexpr int64_t kConvIoKernel = 7;      // conv_in / conv_out: kernel 7, padding 3

std::string stage_group(const std::string & prefix, std::size_t i) { return prefix + "stage." + std::to_string(i); }
std::string resnet_prefix(const std::string & prefix, const VocoderConfig & c, std::size_t stage, std::size_t r) {
    return prefix + "resnets." + std::to_string(stage * c.resnet_kernel_sizes.size() + r) + ".";
}

// One activation module at `path` ("...acts1.0." or "act_out.") over `channels`: its SnakeBeta parameters (under
// "act." when anti-aliased) and the Kaiser-sinc filters of the anti-aliased form.
void add_activation(std::vector<AudioTensorSpec> & s, const std::string & path, int64_t channels, bool beta,
                    bool antialias, int64_t kernel) {
    const std::string act = antialias ? path + "act." : path;
    s.push_back({act + "alpha", {channels}});
    if (beta) s.push_back({act + "beta", {channels}});
    if (antialias) {
        s.push_back({path + "upsample.filter", {1, 1, kernel}});
        s.push_back({path + "downsample.filter", {1, 1, kernel}});
    }
}

std::vector<std::pair<std::string, std::vector<AudioTensorSpec>>> grouped_specs(const VocoderConfig & c,
                                                                                const std::string & p) {
    std::vector<std::pair<std::string, std::vector<AudioTensorSpec>>> g;
    g.push_back({p + "conv_in",
                 {{p + "conv_in.weight", {c.hidden_channels, c.in_channels, kConvIoKernel}},
                  {p + "conv_in.bias", {c.hidden_channels}}}});
    int64_t in = c.hidden_channels;
    for (std::size_t i = 0; i < c.stages(); ++i) {
        const int64_t ch = c.stage_channels(i);
        const std::string up = p + "upsamplers." + std::to_string(i) + ".";
        std::vector<AudioTensorSpec> s{{up + "weight", {in, ch, c.upsample_kernel_sizes[i]}}, {up + "bias", {ch}}};
        for (std::size_t r = 0; r < c.resnet_kernel_sizes.size(); ++r) {
            const auto rp = resnet_prefix(p, c, i, r);
            const int64_t k = c.resnet_kernel_sizes[r];
            for (std::size_t j = 0; j < c.resnet_dilations[r].size(); ++j) {
                const auto js = std::to_string(j);
                for (const std::string convs : {"convs1.", "convs2."}) {
                    s.push_back({rp + convs + js + ".weight", {ch, ch, k}});
                    s.push_back({rp + convs + js + ".bias", {ch}});
                }
                if (c.snake()) {
                    const bool beta = c.act_fn == VocoderActivation::snakebeta;
                    add_activation(s, rp + "acts1." + js + ".", ch, beta, c.antialias, c.antialias_kernel_size);
                    add_activation(s, rp + "acts2." + js + ".", ch, beta, c.antialias, c.antialias_kernel_size);
                }
            }
        }
        g.push_back({stage_group(p, i), std::move(s)});
        in = ch;
    }
    std::vector<AudioTensorSpec> s;
    if (c.snake()) add_activation(s, p + "act_out.", in, true, true, c.antialias_kernel_size);
    s.push_back({p + "conv_out.weight", {c.out_channels, in, kConvIoKernel}});
    if (c.final_bias) s.push_back({p + "conv_out.bias", {c.out_channels}});
    g.push_back({p + "conv_out", std::move(s)});
    return g;
}

// SnakeBeta (log scale): x + 1 / (exp(beta) + eps) * sin(x * exp(alpha))^2; amplitude = alpha without beta.
at::Tensor snake(Weights & w, const std::string & act, bool beta, const at::Tensor & x) {
    const auto alpha = at::exp(w.get(act + "alpha").view({1, -1, 1}));
    const auto amplitude = beta ? at::exp(w.get(act + "beta").view({1, -1, 1})) : alpha;
    return x + at::reciprocal(amplitude + kSnakeEps) * at::sin(x * alpha).pow(2);
}

// UpSample1d (Kaiser): replicate pad, depthwise transposed conv with the filter at stride `ratio`, times ratio, crop.
at::Tensor upsample_1d(const at::Tensor & x, const at::Tensor & filter, int64_t ratio) {
    const int64_t k = filter.size(2), pad = k / ratio - 1;
    const int64_t pad_left = pad * ratio + (k - ratio) / 2, pad_right = pad * ratio + (k - ratio + 1) / 2;
    const int64_t ch = x.size(1);
    const auto padded = at::replication_pad1d(x, {pad, pad});
    const auto y = at::conv_transpose1d(padded, filter.to(x.scalar_type()).expand({ch, -1, -1}), {}, {ratio}, {0},
                                        {0}, ch) * ratio;
    return y.slice(2, pad_left, y.size(2) - pad_right);
}

// DownSample1d: replicate pad, depthwise low-pass conv at stride `ratio`.
at::Tensor downsample_1d(const at::Tensor & x, const at::Tensor & filter, int64_t ratio) {
    const int64_t k = filter.size(2);
    const int64_t ch = x.size(1);
    const auto padded = at::replication_pad1d(x, {k / 2 + k % 2 - 1, k / 2});
    return at::conv1d(padded, filter.expand({ch, -1, -1}), std::nullopt, at::IntArrayRef{ratio}, at::IntArrayRef{0},
                      at::IntArrayRef{1}, ch);
}

// An activation module at `path` (see add_activation); leaky ReLU has no weights.
at::Tensor activation(Weights & w, const VocoderConfig & c, const std::string & path, bool beta, bool antialias,
                      const at::Tensor & x) {
    if (!antialias) return snake(w, path, beta, x);
    auto h = upsample_1d(x, w.get(path + "upsample.filter"), c.antialias_ratio);
    h = snake(w, path + "act.", beta, h);
    return downsample_1d(h, w.get(path + "downsample.filter"), c.antialias_ratio);
}

at::Tensor resblock_activation(Weights & w, const VocoderConfig & c, const std::string & path, const at::Tensor & x) {
    if (!c.snake()) return at::leaky_relu(x, c.leaky_relu_negative_slope);
    return activation(w, c, path, c.act_fn == VocoderActivation::snakebeta, c.antialias, x);
}

// ResBlock: for each dilation d: x += conv2(act2(conv1_d(act1(x)))), convs with padding "same".
at::Tensor resblock(Weights & w, const VocoderConfig & c, const std::string & rp, std::size_t r, at::Tensor x) {
    for (std::size_t j = 0; j < c.resnet_dilations[r].size(); ++j) {
        const auto js = std::to_string(j);
        auto h = resblock_activation(w, c, rp + "acts1." + js + ".", x);
        h = at::conv1d(h, w.get(rp + "convs1." + js + ".weight"), w.get(rp + "convs1." + js + ".bias"), {1}, "same",
                       {c.resnet_dilations[r][j]});
        h = resblock_activation(w, c, rp + "acts2." + js + ".", h);
        h = at::conv1d(h, w.get(rp + "convs2." + js + ".weight"), w.get(rp + "convs2." + js + ".bias"), {1}, "same",
                       {1});
        x = x + h;
    }
    return x;
}

}  // namespace

std::vector<AudioTensorSpec> vocoder_specs(const VocoderConfig & config, const std::string & prefix) {
    std::vector<AudioTensorSpec> all;
    for (auto & [name, specs] : grouped_specs(config, prefix)) all.insert(all.end(), specs.begin(), specs.end());
    return all;
}

void validate_vocoder(const model::TensorFile & file, const VocoderConfig & config) {
    for (const auto & s : vocoder_specs(config)) file.check(s.name, s.shape);
}

std::vector<model::GroupSpec> vocoder_groups(const VocoderConfig & config, const std::string & prefix) {
    std::vector<model::GroupSpec> groups;
    for (auto & [name, specs] : grouped_specs(config, prefix)) {
        model::GroupSpec g{name, {}};
        for (const auto & s : specs) g.tensors.push_back(s.name);
        groups.push_back(std::move(g));
    }
    return groups;
}

Vocoder::Vocoder(VocoderConfig config, std::string prefix) : config_(std::move(config)), prefix_(std::move(prefix)) {}

at::Tensor Vocoder::forward(Weights & w, const at::Tensor & mel) const {
    const auto & c = config_;
    const auto & p = prefix_;
    if (mel.dim() != 4 || mel.size(1) * mel.size(3) != c.in_channels) {
        throw RuntimeError("vocoder: the mel spectrogram must be [B, C, T, M] with C*M = in_channels = " +
                           std::to_string(c.in_channels) + ", got " + model::shape_str(mel.sizes()));
    }
    // [B, C, T, M] -> [B, C, M, T] -> [B, C*M, T]
    auto x = mel.to(w.device(), w.dtype()).transpose(2, 3).flatten(1, 2);
    {
        Weights::Scope s(w, p + "conv_in");
        x = at::conv1d(x, w.get(p + "conv_in.weight"), w.get(p + "conv_in.bias"), {1}, {kConvIoKernel / 2});
    }
    for (std::size_t i = 0; i < c.stages(); ++i) {
        Weights::Scope s(w, stage_group(p, i));
        if (!c.snake()) x = at::leaky_relu(x, c.leaky_relu_negative_slope);
        const std::string up = p + "upsamplers." + std::to_string(i) + ".";
        const int64_t k = c.upsample_kernel_sizes[i], u = c.upsample_factors[i];
        x = at::conv_transpose1d(x, w.get(up + "weight"), w.get(up + "bias"), {u}, {(k - u) / 2});
        std::vector<at::Tensor> outs;
        for (std::size_t r = 0; r < c.resnet_kernel_sizes.size(); ++r) {
            outs.push_back(resblock(w, c, resnet_prefix(p, c, i, r), r, x));
        }
        x = at::mean(at::stack(outs, 0), {0});
    }
    Weights::Scope s(w, p + "conv_out");
    x = c.snake() ? activation(w, c, p + "act_out.", /*beta=*/true, /*antialias=*/true, x)
                  : at::leaky_relu(x, kActOutSlope);
    const auto bias = c.final_bias ? std::optional<at::Tensor>(w.get(p + "conv_out.bias")) : std::nullopt;
    x = at::conv1d(x, w.get(p + "conv_out.weight"), bias, {1}, {kConvIoKernel / 2});
    switch (c.final_act_fn) {
        case VocoderFinalActivation::tanh: return at::tanh(x);
        case VocoderFinalActivation::clamp: return at::clamp(x, -1, 1);
        case VocoderFinalActivation::none: break;
    }
    return x;
}

}  // namespace ddo::ltx2
