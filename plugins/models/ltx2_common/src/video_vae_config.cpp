// VideoVaeConfig parsing, the up-block layout and the decoder state-dict spec (reference:
// AutoencoderKLLTX2Video.__init__ and LTX2VideoDecoder3d.__init__ in diffusers autoencoder_kl_ltx2.py).
#include "video_vae_config.hpp"

#include <algorithm>
#include <fstream>

#include <c10/core/ScalarType.h>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

const std::string & key_fix() {
    static const std::string s = "; use a diffusers AutoencoderKLLTX2Video config (LTX-2.0 or 2.3) or re-export it";
    return s;
}

[[noreturn]] void unsupported(const std::filesystem::path & file, const std::string & key, const std::string & what) {
    throw UsageError(file.string() + ": key '" + key + "': " + what + key_fix());
}

template <class T>
void read(const nlohmann::json & j, const char * key, T & out, const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;  // the reference's default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                           "); fix the checkpoint's config or re-export it with diffusers");
    }
}

// A `bool | tuple[bool, ...]` field: a bool stands for `n` copies, as the reference expands it.
void read_bools(const nlohmann::json & j, const char * key, std::vector<bool> & out, std::size_t n,
                const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_boolean()) {
        out.assign(n, it->get<bool>());
        return;
    }
    read(j, key, out, file);
}

void require_size(std::size_t got, std::size_t want, const std::filesystem::path & file, const char * key,
                  const char * of) {
    if (got != want)
        unsupported(file, key, "has " + std::to_string(got) + " entries, expected " + std::to_string(want) + " (" +
                                   of + ")");
}

std::array<int64_t, 3> stride_of(const std::string & type, const std::filesystem::path & file, std::size_t i,
                                 const char * key = "upsample_type") {
    if (type == "spatial") return {1, 2, 2};
    if (type == "temporal") return {2, 1, 1};
    if (type == "spatiotemporal") return {2, 2, 2};
    unsupported(file, key, "entry " + std::to_string(i) + " is '" + type +
                               "' (expected spatial, temporal or spatiotemporal" +
                               (std::string(key) == "downsample_type" ? ", or conv)" : ")"));
}

SpatialPadding padding_of(const std::string & mode, const std::filesystem::path & file, const char * key) {
    if (mode == "zeros") return SpatialPadding::zeros;
    if (mode == "reflect") return SpatialPadding::reflect;
    if (mode == "replicate") return SpatialPadding::replicate;
    if (mode == "circular") return SpatialPadding::circular;
    unsupported(file, key, "'" + mode + "' is not a Conv3d padding mode (zeros, reflect, replicate, circular)");
}

void derive_blocks(VideoVaeConfig & c) {
    const auto & f = c.file;
    const std::size_t n = c.decoder_block_out_channels.size();
    if (n == 0) unsupported(f, "decoder_block_out_channels", "is empty");
    require_size(c.decoder_layers_per_block.size(), n + 1, f, "decoder_layers_per_block",
                 "one more than decoder_block_out_channels: the mid block first after reversal");
    require_size(c.decoder_spatio_temporal_scaling.size(), n, f, "decoder_spatio_temporal_scaling",
                 "one per decoder block");
    // upsample_type is indexed, not reversed, by LTX2VideoDecoder3d (upsample_type[i] for block i): entries past the
    // last block are never read, as the class default of three entries with a one-block decoder shows.
    if (c.upsample_type.size() < n)
        unsupported(f, "upsample_type", "has " + std::to_string(c.upsample_type.size()) + " entries, expected at least " +
                                            std::to_string(n) + " (one per decoder block)");
    c.upsample_type.resize(n);
    require_size(c.upsample_residual.size(), n, f, "upsample_residual", "one per decoder block");
    require_size(c.upsample_factor.size(), n, f, "upsample_factor", "one per decoder block");
    for (auto w : c.decoder_block_out_channels)
        if (w <= 0) unsupported(f, "decoder_block_out_channels", "widths must be positive");
    for (auto l : c.decoder_layers_per_block)
        if (l < 0) unsupported(f, "decoder_layers_per_block", "layer counts must be >= 0");
    for (auto u : c.upsample_factor)
        if (u <= 0) unsupported(f, "upsample_factor", "factors must be positive");

    // Reversed as the reference does (upsample_type is not reversed).
    auto rev = [](auto v) { return decltype(v)(v.rbegin(), v.rend()); };
    const auto widths = rev(c.decoder_block_out_channels);
    const auto layers = rev(c.decoder_layers_per_block);
    const auto scaling = rev(c.decoder_spatio_temporal_scaling);
    const auto residual = rev(c.upsample_residual);
    const auto factor = rev(c.upsample_factor);

    c.mid_channels = widths[0];
    c.mid_layers = layers[0];
    c.up_blocks.clear();
    int64_t hidden = widths[0];  // the width really entering each block
    for (std::size_t i = 0; i < n; ++i) {
        VideoVaeUpBlock b;
        const int64_t u = factor[i];
        const int64_t ref_in = hidden / u;  // the reference's in_channels (output_channel // upsample_factor)
        b.input_width = hidden;
        b.upscale_factor = u;
        b.out_channels = widths[i] / u;
        b.conv_in = ref_in != b.out_channels;
        b.upsample = scaling[i];
        b.stride = stride_of(c.upsample_type[i], f, i);
        b.residual = residual[i];
        b.width = b.out_channels * u;
        b.layers = layers[i + 1];
        b.time_embed_dim = 4 * ref_in;
        const std::string blk = "up block " + std::to_string(i) + " (after reversal)";
        if (b.conv_in && u != 1)
            unsupported(f, "upsample_factor", blk + " changes width " + std::to_string(ref_in) + " -> " +
                                                  std::to_string(b.out_channels) + " with upsample_factor " +
                                                  std::to_string(u) + ": the reference cannot run that block");
        const int64_t after_in = b.conv_in ? b.out_channels : hidden;
        if (b.upsample && after_in != b.width)
            unsupported(f, "decoder_block_out_channels",
                        blk + ": the upsampler expects " + std::to_string(b.width) + " channels, the block gets " +
                            std::to_string(after_in));
        if (!b.upsample && after_in != b.out_channels)
            unsupported(f, "decoder_block_out_channels",
                        blk + " without upsampler gets " + std::to_string(after_in) + " channels, its resnets take " +
                            std::to_string(b.out_channels));
        if (b.upsample && (b.width * b.stride[0] * b.stride[1] * b.stride[2]) % u != 0)
            unsupported(f, "upsample_factor", blk + ": factor " + std::to_string(u) + " does not divide the upsampler");
        if (c.timestep_conditioning && b.conv_in)
            unsupported(f, "timestep_conditioning",
                        blk + " has a conv_in resnet, which the reference cannot condition on the timestep");
        c.up_blocks.push_back(b);
        hidden = b.out_channels;
    }
    c.final_channels = hidden;
}

// LTX2VideoEncoder3d.__init__: conv_in to latent_channels, then per block `layers` resnets at the incoming width and
// the downsampler to block_out_channels[i]; the mid block at the last width.
void derive_encoder_blocks(VideoVaeConfig & c) {
    const auto & f = c.file;
    const std::size_t n = c.block_out_channels.size();
    if (n == 0) unsupported(f, "block_out_channels", "is empty");
    // Indexed per block by the reference, and the mid block takes layers_per_block's last entry: n + 1 entries in
    // the real configs, n in the pipelines' tiny test VAEs (the last block and the mid block share it); entries past
    // those are never read.
    if (c.layers_per_block.size() < n)
        unsupported(f, "layers_per_block", "has " + std::to_string(c.layers_per_block.size()) +
                                               " entries, expected at least " + std::to_string(n) +
                                               " (one per encoder block, the last also the mid block's)");
    if (c.spatio_temporal_scaling.size() < n)
        unsupported(f, "spatio_temporal_scaling", "has " + std::to_string(c.spatio_temporal_scaling.size()) +
                                                      " entries, expected at least " + std::to_string(n) +
                                                      " (one per encoder block)");
    if (c.down_block_types.size() < n)
        unsupported(f, "down_block_types", "has " + std::to_string(c.down_block_types.size()) +
                                               " entries, expected at least " + std::to_string(n) +
                                               " (one per encoder block)");
    if (c.downsample_type.size() < n)
        unsupported(f, "downsample_type", "has " + std::to_string(c.downsample_type.size()) +
                                              " entries, expected at least " + std::to_string(n) +
                                              " (one per encoder block)");
    for (auto w : c.block_out_channels)
        if (w <= 0) unsupported(f, "block_out_channels", "widths must be positive");
    for (auto l : c.layers_per_block)
        if (l < 0) unsupported(f, "layers_per_block", "layer counts must be >= 0");
    if (c.in_channels <= 0) unsupported(f, "in_channels", "must be positive");

    c.down_blocks.clear();
    int64_t hidden = c.latent_channels;  // conv_in's output width
    for (std::size_t i = 0; i < n; ++i) {
        const std::string blk = "encoder block " + std::to_string(i);
        if (c.down_block_types[i] != "LTX2VideoDownBlock3D")
            unsupported(f, "down_block_types", "entry " + std::to_string(i) + " is '" + c.down_block_types[i] +
                                                   "' (expected LTX2VideoDownBlock3D)");
        VideoVaeDownBlock b;
        b.in_channels = hidden;
        b.out_channels = c.block_out_channels[i];
        b.layers = c.layers_per_block[i];
        b.downsample = c.spatio_temporal_scaling[i];
        int64_t produced = hidden;
        if (b.downsample) {
            b.strided_conv = c.downsample_type[i] == "conv";
            if (!b.strided_conv) {
                b.stride = stride_of(c.downsample_type[i], f, i, "downsample_type");
                const int64_t prod = b.stride[0] * b.stride[1] * b.stride[2];
                if (b.out_channels % prod != 0 || (b.in_channels * prod) % b.out_channels != 0)
                    unsupported(f, "block_out_channels",
                                blk + ": its downsampler maps " + std::to_string(b.in_channels) + " x " +
                                    std::to_string(prod) + " channels to " + std::to_string(b.out_channels) +
                                    " by group means: the width must divide the first and be a multiple of " +
                                    std::to_string(prod));
                produced = b.out_channels;
            }
        }
        if (produced != b.out_channels)
            unsupported(f, "block_out_channels",
                        blk + " keeps its width " + std::to_string(hidden) +
                            " (no downsampler, or a 'conv' one) but block_out_channels says " +
                            std::to_string(b.out_channels) + ": the reference cannot run the next block");
        c.down_blocks.push_back(b);
        hidden = b.out_channels;
    }
    c.encoder_mid_channels = hidden;
    c.encoder_mid_layers = c.layers_per_block.back();
}

}  // namespace

int64_t VideoVaeConfig::spatial_upscale() const {
    int64_t s = patch_size;
    for (const auto & b : up_blocks)
        if (b.upsample) s *= b.stride[1];
    return s;
}

int64_t VideoVaeConfig::temporal_upscale() const {
    int64_t s = 1;
    for (const auto & b : up_blocks)
        if (b.upsample) s *= b.stride[0];
    return s;
}

int64_t VideoVaeConfig::decoded_frames(int64_t latent_frames) const {
    int64_t f = latent_frames;
    for (const auto & b : up_blocks)
        if (b.upsample) f = f * b.stride[0] - (b.stride[0] - 1);
    return f;
}

int64_t VideoVaeConfig::spatial_downscale() const {
    int64_t s = patch_size;
    for (const auto & b : down_blocks)
        if (b.downsample) s *= b.strided_conv ? 2 : b.stride[1];
    return s;
}

int64_t VideoVaeConfig::encoded_frames(int64_t frames) const {
    int64_t f = frames / patch_size_t;
    for (const auto & b : down_blocks)
        if (b.downsample) f = b.strided_conv ? (f - 1) / 2 + 1 : (f + b.stride[0] - 1) / b.stride[0];
    return f;
}

bool VideoVaeConfig::encodable_frames(int64_t frames) const {
    if (frames < 1) return false;
    int64_t f = frames;
    for (const auto & b : down_blocks) {
        if (!b.downsample) continue;
        if (b.strided_conv) {
            f = (f - 1) / 2 + 1;
        } else {
            if ((f + b.stride[0] - 1) % b.stride[0] != 0) return false;  // the frames are split in groups of s_t
            f = (f + b.stride[0] - 1) / b.stride[0];
        }
    }
    return true;
}

bool VideoVaeConfig::encodable_pixels(int64_t pixels) const {
    if (pixels < 1 || pixels % patch_size != 0) return false;
    int64_t p = pixels / patch_size, smallest = p;
    for (const auto & b : down_blocks) {
        if (!b.downsample) continue;
        if (b.strided_conv) {
            p = (p - 1) / 2 + 1;
        } else {
            if (p % b.stride[1] != 0) return false;  // space-to-depth
            p /= b.stride[1];
        }
        smallest = std::min(smallest, p);
    }
    // reflect padding of a 3x3 kernel needs 2 pixels per side at every convolution.
    return encoder_spatial_padding != SpatialPadding::reflect || smallest >= 2;
}

VideoVaeConfig VideoVaeConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    VideoVaeConfig c;
    c.file = file;
    read(j, "latent_channels", c.latent_channels, file);
    read(j, "out_channels", c.out_channels, file);
    read(j, "decoder_block_out_channels", c.decoder_block_out_channels, file);
    read(j, "decoder_layers_per_block", c.decoder_layers_per_block, file);
    const std::size_t n_minus_1 = c.decoder_layers_per_block.empty() ? 0 : c.decoder_layers_per_block.size() - 1;
    read_bools(j, "decoder_spatio_temporal_scaling", c.decoder_spatio_temporal_scaling, n_minus_1, file);
    read(j, "upsample_type", c.upsample_type, file);
    read_bools(j, "upsample_residual", c.upsample_residual, n_minus_1, file);
    read(j, "upsample_factor", c.upsample_factor, file);
    read(j, "timestep_conditioning", c.timestep_conditioning, file);
    read(j, "patch_size", c.patch_size, file);
    read(j, "patch_size_t", c.patch_size_t, file);
    read(j, "resnet_norm_eps", c.resnet_norm_eps, file);
    read(j, "scaling_factor", c.scaling_factor, file);
    read(j, "decoder_causal", c.decoder_causal, file);
    std::string padding = "reflect";
    read(j, "decoder_spatial_padding_mode", padding, file);
    c.decoder_spatial_padding = padding_of(padding, file, "decoder_spatial_padding_mode");
    read(j, "in_channels", c.in_channels, file);
    read(j, "block_out_channels", c.block_out_channels, file);
    read(j, "down_block_types", c.down_block_types, file);
    read(j, "layers_per_block", c.layers_per_block, file);
    read_bools(j, "spatio_temporal_scaling", c.spatio_temporal_scaling,
               c.layers_per_block.empty() ? 0 : c.layers_per_block.size() - 1, file);
    read(j, "downsample_type", c.downsample_type, file);
    read(j, "encoder_causal", c.encoder_causal, file);
    std::string enc_padding = "zeros";
    read(j, "encoder_spatial_padding_mode", enc_padding, file);

    std::vector<bool> noise(c.decoder_layers_per_block.size(), false);
    read_bools(j, "decoder_inject_noise", noise, c.decoder_layers_per_block.size(), file);
    for (bool b : noise)
        if (b) unsupported(file, "decoder_inject_noise", "noise injection is not supported (all entries must be false)");
    if (c.latent_channels <= 0) unsupported(file, "latent_channels", "must be positive");
    if (c.out_channels <= 0) unsupported(file, "out_channels", "must be positive");
    if (c.patch_size <= 0) unsupported(file, "patch_size", "must be positive");
    if (c.patch_size_t != 1)
        unsupported(file, "patch_size_t", "must be 1 (the reference's decoder unpatchify is only defined for 1)");
    if (!(c.scaling_factor > 0)) unsupported(file, "scaling_factor", "must be positive");
    if (!(c.resnet_norm_eps > 0)) unsupported(file, "resnet_norm_eps", "must be positive");

    // Compression ratios as the reference computes them: explicit, else from the encoder's scaling list.
    int64_t pow2 = 1;
    for (bool b : c.spatio_temporal_scaling)
        if (b) pow2 *= 2;
    c.spatial_compression_ratio = c.patch_size * pow2;
    c.temporal_compression_ratio = c.patch_size_t * pow2;
    read(j, "spatial_compression_ratio", c.spatial_compression_ratio, file);
    read(j, "temporal_compression_ratio", c.temporal_compression_ratio, file);
    if (c.spatial_compression_ratio <= 0) unsupported(file, "spatial_compression_ratio", "must be positive");
    if (c.temporal_compression_ratio <= 0) unsupported(file, "temporal_compression_ratio", "must be positive");

    derive_blocks(c);
    // The encoder is validated when a run uses it (Note [Components validated when used]): a configuration it
    // cannot run is kept as the reason require_encoder() gives.
    try {
        c.encoder_spatial_padding = padding_of(enc_padding, file, "encoder_spatial_padding_mode");
        derive_encoder_blocks(c);
    } catch (const UsageError & e) {
        c.encoder_refusal = e.what();
        c.down_blocks.clear();
        c.encoder_mid_channels = 0;
        c.encoder_mid_layers = 0;
    }
    return c;
}

void VideoVaeConfig::require_encoder(const std::string & use) const {
    if (encoder_refusal.empty()) return;
    throw UsageError(use + " needs the video VAE's encoder, which ddo cannot run: " + encoder_refusal +
                     " (runs that do not encode, such as text-to-video, do not use it)");
}

VideoVaeConfig VideoVaeConfig::load(const std::filesystem::path & vae_dir) {
    const auto file = vae_dir / "config.json";
    std::ifstream in(file);
    if (!in) throw RuntimeError(file.string() + ": cannot be read; the vae/ folder of an LTX-2 diffusers checkpoint "
                                "must hold config.json");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": not valid JSON (" + e.what() + "); re-download or re-export the VAE");
    }
    return from_json(j, file);
}

namespace {

void conv(VideoVaeWeightSpec & s, const std::string & p, int64_t out, int64_t in, int64_t k) {
    s.push_back({p + ".weight", {out, in, k, k, k}});
    s.push_back({p + ".bias", {out}});
}

// In the order the forward uses them (video_vae_leaf_groups follows this order).
void resnet(VideoVaeWeightSpec & s, const std::string & p, int64_t in, int64_t out, bool tcond) {
    if (tcond) s.push_back({p + ".scale_shift_table", {4, in}});
    conv(s, p + ".conv1.conv", out, in, 3);
    conv(s, p + ".conv2.conv", out, out, 3);
    if (in != out) {
        s.push_back({p + ".norm3.weight", {in}});
        s.push_back({p + ".norm3.bias", {in}});
        conv(s, p + ".conv_shortcut", out, in, 1);
    }
}

void time_embedder(VideoVaeWeightSpec & s, const std::string & p, int64_t dim) {
    s.push_back({p + ".timestep_embedder.linear_1.weight", {dim, 256}});
    s.push_back({p + ".timestep_embedder.linear_1.bias", {dim}});
    s.push_back({p + ".timestep_embedder.linear_2.weight", {dim, dim}});
    s.push_back({p + ".timestep_embedder.linear_2.bias", {dim}});
}

}  // namespace

VideoVaeWeightSpec video_vae_decoder_specs(const VideoVaeConfig & c) {
    VideoVaeWeightSpec s;
    const bool t = c.timestep_conditioning;
    conv(s, "decoder.conv_in.conv", c.mid_channels, c.latent_channels, 3);
    if (t) {
        s.push_back({"decoder.timestep_scale_multiplier", {}});
        s.push_back({"decoder.scale_shift_table", {2, c.final_channels}});
        time_embedder(s, "decoder.mid_block.time_embedder", 4 * c.mid_channels);
    }
    for (int64_t j = 0; j < c.mid_layers; ++j)
        resnet(s, "decoder.mid_block.resnets." + std::to_string(j), c.mid_channels, c.mid_channels, t);
    for (std::size_t i = 0; i < c.up_blocks.size(); ++i) {
        const auto & b = c.up_blocks[i];
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        if (b.conv_in) resnet(s, p + ".conv_in", b.input_width, b.out_channels, t);
        if (t) time_embedder(s, p + ".time_embedder", b.time_embed_dim);
        if (b.upsample)
            conv(s, p + ".upsamplers.0.conv.conv", b.width * b.stride[0] * b.stride[1] * b.stride[2] / b.upscale_factor,
                 b.width, 3);
        for (int64_t j = 0; j < b.layers; ++j)
            resnet(s, p + ".resnets." + std::to_string(j), b.out_channels, b.out_channels, t);
    }
    if (t) time_embedder(s, "decoder.time_embedder", 2 * c.final_channels);
    conv(s, "decoder.conv_out.conv", c.out_channels * c.patch_size * c.patch_size, c.final_channels, 3);
    return s;
}

VideoVaeWeightSpec video_vae_encoder_specs(const VideoVaeConfig & c) {
    c.require_encoder("the encoder's weight list");
    VideoVaeWeightSpec s;
    conv(s, "encoder.conv_in.conv", c.latent_channels, c.in_channels * c.patch_size * c.patch_size, 3);
    for (std::size_t i = 0; i < c.down_blocks.size(); ++i) {
        const auto & b = c.down_blocks[i];
        const std::string p = "encoder.down_blocks." + std::to_string(i);
        for (int64_t j = 0; j < b.layers; ++j)
            resnet(s, p + ".resnets." + std::to_string(j), b.in_channels, b.in_channels, false);
        if (!b.downsample) continue;
        if (b.strided_conv)
            conv(s, p + ".downsamplers.0.conv", b.in_channels, b.in_channels, 3);
        else
            conv(s, p + ".downsamplers.0.conv.conv", b.out_channels / (b.stride[0] * b.stride[1] * b.stride[2]),
                 b.in_channels, 3);
    }
    for (int64_t j = 0; j < c.encoder_mid_layers; ++j)
        resnet(s, "encoder.mid_block.resnets." + std::to_string(j), c.encoder_mid_channels, c.encoder_mid_channels,
               false);
    conv(s, "encoder.conv_out.conv", c.latent_channels + 1, c.encoder_mid_channels, 3);
    return s;
}

void validate_video_vae_encoder_checkpoint(const model::TensorFile & f, const VideoVaeConfig & c) {
    for (const auto & [name, shape] : video_vae_encoder_specs(c)) f.check(name, shape);
    f.check("latents_mean", {c.latent_channels});
    f.check("latents_std", {c.latent_channels});
}

void validate_video_vae_checkpoint(const model::TensorFile & f, const VideoVaeConfig & c) {
    for (const auto & [name, shape] : video_vae_decoder_specs(c)) f.check(name, shape);
    f.check("latents_mean", {c.latent_channels});
    f.check("latents_std", {c.latent_channels});
}

namespace {

std::uint64_t bytes_of(const VideoVaeWeightSpec & spec, at::ScalarType dtype) {
    std::uint64_t n = 0;
    for (const auto & [name, shape] : spec) {
        std::uint64_t e = 1;
        for (auto d : shape) e *= std::uint64_t(d);
        n += e;
    }
    return n * std::uint64_t(c10::elementSize(dtype));
}

}  // namespace

std::uint64_t video_vae_decoder_weight_bytes(const VideoVaeConfig & c, at::ScalarType dtype) {
    return bytes_of(video_vae_decoder_specs(c), dtype);
}

std::uint64_t video_vae_encoder_weight_bytes(const VideoVaeConfig & c, at::ScalarType dtype) {
    return bytes_of(video_vae_encoder_specs(c), dtype);
}

VideoLatentStats read_video_latent_stats(const model::TensorFile & f, const VideoVaeConfig & c) {
    return {f.weight("latents_mean", {c.latent_channels}, at::kFloat),
            f.weight("latents_std", {c.latent_channels}, at::kFloat)};
}

}  // namespace ddo::ltx2
