// LTX-2 audio VAE decoder and audio latent packing (reference: see audio_vae_decoder.hpp).
#include "audio_vae_decoder.hpp"

#include <algorithm>
#include <string>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

constexpr double kPixelNormEps = 1e-6;  // LTX2AudioPixelNorm(dim=1, eps=1e-6) in the resnets and norm_out

// One decoder resnet's channels: (in, out); a causal 1x1 nin_shortcut when they differ.
struct ResnetShape {
    std::string prefix;
    int64_t in;
    int64_t out;
};

std::string level_prefix(std::size_t level) { return "decoder.up." + std::to_string(level); }

// The decoder's resnets per stage, in execution order: mid (block_1, block_2), then up levels n-1 .. 0.
std::vector<ResnetShape> mid_resnets(const AudioVaeConfig & c) {
    const int64_t ch = c.level_channels(c.ch_mult.size() - 1);
    return {{"decoder.mid.block_1", ch, ch}, {"decoder.mid.block_2", ch, ch}};
}

std::vector<ResnetShape> level_resnets(const AudioVaeConfig & c, std::size_t level) {
    std::vector<ResnetShape> r;
    int64_t in = level + 1 < c.ch_mult.size() ? c.level_channels(level + 1) : c.level_channels(level);
    const int64_t out = c.level_channels(level);
    for (int64_t j = 0; j <= c.num_res_blocks; ++j) {
        r.push_back({level_prefix(level) + ".block." + std::to_string(j), in, out});
        in = out;
    }
    return r;
}

void add_conv(std::vector<AudioTensorSpec> & s, const std::string & prefix, int64_t out, int64_t in, int64_t k) {
    s.push_back({prefix + ".weight", {out, in, k, k}});
    s.push_back({prefix + ".bias", {out}});
}

void add_resnet(std::vector<AudioTensorSpec> & s, const ResnetShape & r) {
    add_conv(s, r.prefix + ".conv1.conv", r.out, r.in, 3);
    add_conv(s, r.prefix + ".conv2.conv", r.out, r.out, 3);
    if (r.in != r.out) add_conv(s, r.prefix + ".nin_shortcut.conv", r.out, r.in, 1);
}

// Spec groups in execution order (names as audio_vae_decoder_groups).
std::vector<std::pair<std::string, std::vector<AudioTensorSpec>>> grouped_specs(const AudioVaeConfig & c) {
    std::vector<std::pair<std::string, std::vector<AudioTensorSpec>>> g;
    g.push_back({"latents_stats", {{"latents_mean", {c.base_channels}}, {"latents_std", {c.base_channels}}}});
    const std::size_t n = c.ch_mult.size();
    std::vector<AudioTensorSpec> s;
    add_conv(s, "decoder.conv_in.conv", c.level_channels(n - 1), c.latent_channels, 3);
    g.push_back({"decoder.conv_in", std::move(s)});
    s = {};
    for (const auto & r : mid_resnets(c)) add_resnet(s, r);
    g.push_back({"decoder.mid", std::move(s)});
    for (std::size_t level = n; level-- > 0;) {
        s = {};
        for (const auto & r : level_resnets(c, level)) add_resnet(s, r);
        if (level != 0) {
            const int64_t ch = c.level_channels(level);
            add_conv(s, level_prefix(level) + ".upsample.conv.conv", ch, ch, 3);
        }
        g.push_back({level_prefix(level), std::move(s)});
    }
    s = {};
    add_conv(s, "decoder.conv_out.conv", c.output_channels, c.level_channels(0), 3);
    g.push_back({"decoder.conv_out", std::move(s)});
    return g;
}

at::Tensor pixel_norm(const at::Tensor & x) {
    const auto mean_sq = at::mean(x.pow(2), {1}, /*keepdim=*/true);
    return x / at::sqrt(mean_sq + kPixelNormEps);
}

// LTX2AudioCausalConv2d with causality_axis "height": zero pad (W: k//2 both sides for odd k, H: k-1 on top), conv.
at::Tensor causal_conv(Weights & w, const std::string & prefix, const at::Tensor & x) {
    const auto weight = w.get(prefix + ".weight");
    const int64_t pad_h = weight.size(2) - 1, pad_w = weight.size(3) - 1;
    const auto padded = at::constant_pad_nd(x, {pad_w / 2, pad_w - pad_w / 2, pad_h, 0}, 0.0);
    return at::conv2d(padded, weight, w.get(prefix + ".bias"));
}

at::Tensor resnet(Weights & w, const ResnetShape & r, const at::Tensor & x) {
    auto h = causal_conv(w, r.prefix + ".conv1.conv", at::silu(pixel_norm(x)));
    h = causal_conv(w, r.prefix + ".conv2.conv", at::silu(pixel_norm(h)));
    const auto skip = r.in != r.out ? causal_conv(w, r.prefix + ".nin_shortcut.conv", x) : x;
    return skip + h;
}

// LTX2AudioUpsample: nearest x2 in time and mel, causal 3x3 conv, drop the first time row.
at::Tensor upsample(Weights & w, const std::string & prefix, const at::Tensor & x) {
    const auto up = at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2});
    const auto y = causal_conv(w, prefix + ".conv.conv", up);
    return y.slice(2, 1);
}

}  // namespace

std::vector<AudioTensorSpec> audio_vae_decoder_specs(const AudioVaeConfig & config) {
    std::vector<AudioTensorSpec> all;
    for (auto & [name, specs] : grouped_specs(config)) all.insert(all.end(), specs.begin(), specs.end());
    return all;
}

void validate_audio_vae_decoder(const model::TensorFile & file, const AudioVaeConfig & config) {
    for (const auto & s : audio_vae_decoder_specs(config)) file.check(s.name, s.shape);
}

std::vector<model::GroupSpec> audio_vae_decoder_groups(const AudioVaeConfig & config) {
    std::vector<model::GroupSpec> groups;
    for (auto & [name, specs] : grouped_specs(config)) {
        model::GroupSpec g{name, {}};
        for (const auto & s : specs) g.tensors.push_back(s.name);
        groups.push_back(std::move(g));
    }
    return groups;
}

at::Tensor pack_audio_latents(const at::Tensor & latents) {
    if (latents.dim() != 4) {
        throw RuntimeError("pack_audio_latents: audio latents must be [B, C, L, M], got " +
                           model::shape_str(latents.sizes()));
    }
    return latents.transpose(1, 2).flatten(2, 3);
}

at::Tensor unpack_audio_latents(const at::Tensor & packed, int64_t latent_mel_bins) {
    if (packed.dim() != 3 || latent_mel_bins <= 0 || packed.size(2) % latent_mel_bins != 0) {
        throw RuntimeError("unpack_audio_latents: packed audio latents must be [B, L, C*" +
                           std::to_string(latent_mel_bins) + "], got " + model::shape_str(packed.sizes()));
    }
    return packed.unflatten(2, {-1, latent_mel_bins}).transpose(1, 2);
}

at::Tensor denormalize_audio_latents(Weights & w, const at::Tensor & packed) {
    Weights::Scope s(w, "latents_stats");
    const auto mean = w.get("latents_mean").to(packed.device(), packed.scalar_type());
    const auto std_ = w.get("latents_std").to(packed.device(), packed.scalar_type());
    if (packed.dim() != 3 || packed.size(2) != mean.size(0)) {
        throw RuntimeError("denormalize_audio_latents: packed audio latents must be [B, L, " +
                           std::to_string(mean.size(0)) + "] (the length of latents_mean), got " +
                           model::shape_str(packed.sizes()));
    }
    return packed * std_ + mean;
}

at::Tensor normalize_audio_latents(Weights & w, const at::Tensor & packed) {
    Weights::Scope s(w, "latents_stats");
    const auto mean = w.get("latents_mean").to(packed.device(), packed.scalar_type());
    const auto std_ = w.get("latents_std").to(packed.device(), packed.scalar_type());
    if (packed.dim() != 3 || packed.size(2) != mean.size(0)) {
        throw RuntimeError("normalize_audio_latents: packed audio latents must be [B, L, " +
                           std::to_string(mean.size(0)) + "] (the length of latents_mean), got " +
                           model::shape_str(packed.sizes()));
    }
    return (packed - mean) / std_;
}

AudioVaeDecoder::AudioVaeDecoder(AudioVaeConfig config) : config_(std::move(config)) {}

at::Tensor AudioVaeDecoder::decode(Weights & w, const at::Tensor & latents) const {
    const auto & c = config_;
    if (latents.dim() != 4 || latents.size(1) != c.latent_channels) {
        throw RuntimeError("audio VAE decode: latents must be [B, " + std::to_string(c.latent_channels) +
                           ", L, M], got " + model::shape_str(latents.sizes()));
    }
    const int64_t target_frames = AudioVaeConfig::mel_frames(latents.size(2));
    auto h = latents.to(w.device(), w.dtype());
    {
        Weights::Scope s(w, "decoder.conv_in");
        h = causal_conv(w, "decoder.conv_in.conv", h);
    }
    {
        Weights::Scope s(w, "decoder.mid");
        for (const auto & r : mid_resnets(c)) h = resnet(w, r, h);  // mid.attn_1 is the identity
    }
    for (std::size_t level = c.ch_mult.size(); level-- > 0;) {
        Weights::Scope s(w, level_prefix(level));
        for (const auto & r : level_resnets(c, level)) h = resnet(w, r, h);
        if (level != 0) h = upsample(w, level_prefix(level) + ".upsample", h);
    }
    {
        Weights::Scope s(w, "decoder.conv_out");
        h = causal_conv(w, "decoder.conv_out.conv", at::silu(pixel_norm(h)));
    }
    // Crop to the target frames and mel bins, then zero-pad what is missing (bottom rows, right columns).
    h = h.slice(2, 0, std::min(h.size(2), target_frames)).slice(3, 0, std::min(h.size(3), c.mel_bins));
    const int64_t pad_t = target_frames - h.size(2), pad_m = c.mel_bins - h.size(3);
    if (pad_t > 0 || pad_m > 0) h = at::constant_pad_nd(h, {0, pad_m, 0, pad_t}, 0.0);
    return h;
}

}  // namespace ddo::ltx2
