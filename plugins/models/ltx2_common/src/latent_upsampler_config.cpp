// LatentUpsamplerConfig parsing, the state-dict spec, validation and execution groups (reference:
// LTX2LatentUpsamplerModel.__init__, ResBlock, SpatialRationalResampler in diffusers pipelines/ltx2/latent_upsampler.py).
#include "latent_upsampler_config.hpp"

#include <fstream>

#include <c10/core/ScalarType.h>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

[[noreturn]] void unsupported(const std::filesystem::path & file, const std::string & key, const std::string & what) {
    throw UsageError(file.string() + ": key '" + key + "': " + what +
                     "; use a diffusers LTX2LatentUpsamplerModel config (latent_upsampler/config.json of LTX-2.0 or "
                     "2.3) or re-export it");
}

template <class T>
void read(const nlohmann::json & j, const char * key, T & out, const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;  // the reference's default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                           "); fix the upsampler's config or re-export it with diffusers");
    }
}

// RATIONAL_RESAMPLER_SCALE_MAPPING (exact float keys, as the reference's dict lookup).
bool rational(double scale, int64_t & num, int64_t & den) {
    static const std::pair<double, std::pair<int64_t, int64_t>> map[] = {
        {0.75, {3, 4}}, {1.5, {3, 2}}, {2.0, {2, 1}}, {4.0, {4, 1}}};
    for (const auto & [s, nd] : map)
        if (s == scale) {
            num = nd.first;
            den = nd.second;
            return true;
        }
    return false;
}

void conv(LatentUpsamplerWeightSpec & s, const std::string & p, int64_t out, int64_t in, int dims) {
    std::vector<int64_t> shape{out, in, 3, 3};
    if (dims == 3) shape.push_back(3);
    s.push_back({p + ".weight", shape});
    s.push_back({p + ".bias", {out}});
}

void norm(LatentUpsamplerWeightSpec & s, const std::string & p, int64_t c) {
    s.push_back({p + ".weight", {c}});
    s.push_back({p + ".bias", {c}});
}

void res_block(LatentUpsamplerWeightSpec & s, const std::string & p, int64_t c) {
    conv(s, p + ".conv1", c, c, 3);
    norm(s, p + ".norm1", c);
    conv(s, p + ".conv2", c, c, 3);
    norm(s, p + ".norm2", c);
}

}  // namespace

int64_t LatentUpsamplerConfig::upsampler_out_channels() const {
    switch (kind) {
    case LatentUpsamplerKind::spatial: return 4 * mid_channels;
    case LatentUpsamplerKind::spatial_rational: return num * num * mid_channels;
    case LatentUpsamplerKind::temporal: return 2 * mid_channels;
    case LatentUpsamplerKind::spatiotemporal: break;
    }
    return 8 * mid_channels;
}

int64_t LatentUpsamplerConfig::out_frames(int64_t frames) const {
    const bool t = kind == LatentUpsamplerKind::temporal || kind == LatentUpsamplerKind::spatiotemporal;
    return t ? 2 * frames - 1 : frames;
}

int64_t LatentUpsamplerConfig::out_height(int64_t height) const {
    switch (kind) {
    case LatentUpsamplerKind::temporal: return height;
    case LatentUpsamplerKind::spatial_rational:
        // BlurDownsample: conv2d kernel 5, padding 2, stride den (identity for den 1).
        return den == 1 ? height * num : (height * num - 1) / den + 1;
    case LatentUpsamplerKind::spatial:
    case LatentUpsamplerKind::spatiotemporal: break;
    }
    return 2 * height;
}

int64_t LatentUpsamplerConfig::out_width(int64_t width) const { return out_height(width); }

std::string LatentUpsamplerConfig::describe() const {
    switch (kind) {
    case LatentUpsamplerKind::spatial: return "spatial x2";
    case LatentUpsamplerKind::spatial_rational: {
        std::string s = std::to_string(rational_spatial_scale);
        s.erase(s.find_last_not_of('0') + 1);
        if (s.back() == '.') s.pop_back();
        return "spatial rational x" + s + " (" + std::to_string(num) + "/" + std::to_string(den) + ")";
    }
    case LatentUpsamplerKind::temporal: return "temporal x2";
    case LatentUpsamplerKind::spatiotemporal: break;
    }
    return "spatiotemporal x2";
}

LatentUpsamplerConfig LatentUpsamplerConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    LatentUpsamplerConfig c;
    c.file = file;
    read(j, "in_channels", c.in_channels, file);
    read(j, "mid_channels", c.mid_channels, file);
    read(j, "num_blocks_per_stage", c.num_blocks_per_stage, file);
    read(j, "dims", c.dims, file);
    read(j, "spatial_upsample", c.spatial_upsample, file);
    read(j, "temporal_upsample", c.temporal_upsample, file);
    read(j, "rational_spatial_scale", c.rational_spatial_scale, file);
    read(j, "use_rational_resampler", c.use_rational_resampler, file);

    if (c.in_channels <= 0) unsupported(file, "in_channels", "must be positive");
    if (c.mid_channels <= 0 || c.mid_channels % 32 != 0)
        unsupported(file, "mid_channels",
                    "is " + std::to_string(c.mid_channels) + ", GroupNorm(32, mid_channels) needs a positive multiple "
                    "of 32");
    if (c.num_blocks_per_stage < 0) unsupported(file, "num_blocks_per_stage", "must be >= 0");
    if (c.dims != 3)
        unsupported(file, "dims", "is " + std::to_string(c.dims) + "; only dims 3 (Conv3d ResBlocks, the released "
                                                                   "LTX-2 upsamplers) is implemented");
    if (!c.spatial_upsample && !c.temporal_upsample)
        unsupported(file, "spatial_upsample", "and temporal_upsample are both false: the reference requires one");
    if (c.spatial_upsample && c.temporal_upsample) {
        c.kind = LatentUpsamplerKind::spatiotemporal;
    } else if (c.temporal_upsample) {
        c.kind = LatentUpsamplerKind::temporal;
    } else if (c.use_rational_resampler) {
        c.kind = LatentUpsamplerKind::spatial_rational;
        if (!rational(c.rational_spatial_scale, c.num, c.den))
            unsupported(file, "rational_spatial_scale",
                        "is " + std::to_string(c.rational_spatial_scale) + "; the rational resampler takes 0.75, 1.5, "
                        "2.0 or 4.0");
    } else {
        c.kind = LatentUpsamplerKind::spatial;
        c.num = 2;
        c.den = 1;
    }
    return c;
}

LatentUpsamplerConfig LatentUpsamplerConfig::load(const std::filesystem::path & dir) {
    const auto file = dir / "config.json";
    std::ifstream in(file);
    if (!in)
        throw RuntimeError(file.string() + ": cannot be read; the latent_upsampler/ folder of an LTX-2 diffusers "
                           "checkpoint must hold config.json");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": not valid JSON (" + e.what() + "); re-download or re-export the "
                           "upsampler");
    }
    return from_json(j, file);
}

LatentUpsamplerConfig LatentUpsamplerConfig::from_weights(const model::TensorFile & f,
                                                         const std::filesystem::path & file) {
    const auto fail = [&](const std::string & tensor, const std::string & what) {
        throw RuntimeError(file.string() + ": tensor '" + tensor + "' " + what +
                           ": not an LTX-2 latent upsampler; give the latent_upsampler/ folder of a diffusers "
                           "checkpoint (with config.json) or a Lightricks spatial / temporal upscaler file");
    };
    if (!f.contains("initial_conv.weight")) fail("initial_conv.weight", "is missing");
    const auto first = f.shape_of("initial_conv.weight");
    if (first.size() != 4 && first.size() != 5) fail("initial_conv.weight", "is not a 2-D or 3-D convolution");
    nlohmann::json j;
    j["mid_channels"] = first[0];
    j["in_channels"] = first[1];
    j["dims"] = first.size() == 5 ? 3 : 2;
    int64_t blocks = 0;
    while (f.contains("res_blocks." + std::to_string(blocks) + ".conv1.weight")) ++blocks;
    j["num_blocks_per_stage"] = blocks;
    const int64_t mid = first[0];
    if (f.contains("upsampler.conv.weight")) {
        const auto s = f.shape_of("upsampler.conv.weight");
        const int64_t ratio = s.empty() || mid == 0 ? 0 : s[0] / mid;
        const double scale = ratio == 4 ? 2.0 : ratio == 9 ? 1.5 : ratio == 16 ? 4.0 : 0.0;
        if (scale == 0.0 || s[0] != ratio * mid)
            fail("upsampler.conv.weight", "has " + model::shape_str(s) + " for mid_channels " + std::to_string(mid) +
                                              " (a rational resampler has 4, 9 or 16 x mid output channels)");
        j["spatial_upsample"] = true;
        j["temporal_upsample"] = false;
        j["use_rational_resampler"] = true;
        j["rational_spatial_scale"] = scale;
    } else if (f.contains("upsampler.0.weight")) {
        const auto s = f.shape_of("upsampler.0.weight");
        const int64_t ratio = s.empty() || mid == 0 ? 0 : s[0] / mid;
        if (s.size() == 4 && s[0] == 4 * mid) {
            j["spatial_upsample"] = true;
            j["temporal_upsample"] = false;
            j["use_rational_resampler"] = false;
        } else if (s.size() == 5 && (ratio == 2 || ratio == 8) && s[0] == ratio * mid) {
            j["spatial_upsample"] = ratio == 8;
            j["temporal_upsample"] = true;
        } else {
            fail("upsampler.0.weight", "has " + model::shape_str(s) + " for mid_channels " + std::to_string(mid) +
                                           " (plain x2: 2-D, 4 x mid; temporal: 3-D, 2 x mid; spatiotemporal: 3-D, "
                                           "8 x mid)");
        }
    } else {
        fail("upsampler.conv.weight", "and upsampler.0.weight are both missing");
    }
    return from_json(j, file);
}

LatentUpsamplerWeightSpec latent_upsampler_specs(const LatentUpsamplerConfig & c) {
    LatentUpsamplerWeightSpec s;
    conv(s, "initial_conv", c.mid_channels, c.in_channels, 3);
    norm(s, "initial_norm", c.mid_channels);
    for (int64_t i = 0; i < c.num_blocks_per_stage; ++i) res_block(s, "res_blocks." + std::to_string(i), c.mid_channels);
    switch (c.kind) {
    case LatentUpsamplerKind::spatial: conv(s, "upsampler.0", c.upsampler_out_channels(), c.mid_channels, 2); break;
    case LatentUpsamplerKind::spatial_rational:
        conv(s, "upsampler.conv", c.upsampler_out_channels(), c.mid_channels, 2);
        break;
    case LatentUpsamplerKind::temporal:
    case LatentUpsamplerKind::spatiotemporal:
        conv(s, "upsampler.0", c.upsampler_out_channels(), c.mid_channels, 3);
        break;
    }
    for (int64_t i = 0; i < c.num_blocks_per_stage; ++i)
        res_block(s, "post_upsample_res_blocks." + std::to_string(i), c.mid_channels);
    conv(s, "final_conv", c.in_channels, c.mid_channels, 3);
    return s;
}

void validate_latent_upsampler_checkpoint(const model::TensorFile & f, const LatentUpsamplerConfig & c) {
    for (const auto & [name, shape] : latent_upsampler_specs(c)) f.check(name, shape);
    if (c.kind == LatentUpsamplerKind::spatial_rational && f.contains(kLatentUpsamplerBlurKernel))
        f.check(kLatentUpsamplerBlurKernel, {1, 1, 5, 5});
}

void check_latent_upsampler_fits_vae(const LatentUpsamplerConfig & up, const VideoVaeConfig & vae) {
    if (up.in_channels != vae.latent_channels)
        throw UsageError(up.file.string() + ": key 'in_channels' is " + std::to_string(up.in_channels) +
                         " but the video VAE (" + vae.file.string() + ") has latent_channels " +
                         std::to_string(vae.latent_channels) +
                         ": this upsampler belongs to another model; use the latent_upsampler of the same LTX-2 "
                         "release as the checkpoint");
}

std::vector<model::GroupSpec> latent_upsampler_groups(const LatentUpsamplerConfig & c, const model::TensorFile & f) {
    std::vector<model::GroupSpec> groups;
    for (const auto & [name, shape] : latent_upsampler_specs(c)) {
        std::string group = name.substr(0, name.find('.'));
        if (group == "initial_conv" || group == "initial_norm") {
            group = "initial";
        } else if (group == "res_blocks" || group == "post_upsample_res_blocks") {
            const auto second = name.find('.', group.size() + 1);
            group = name.substr(0, second);
        }
        if (groups.empty() || groups.back().name != group) groups.push_back({group, {}});
        groups.back().tensors.push_back(name);
    }
    if (c.kind == LatentUpsamplerKind::spatial_rational && f.contains(kLatentUpsamplerBlurKernel))
        for (auto & g : groups)
            if (g.name == "upsampler") g.tensors.push_back(kLatentUpsamplerBlurKernel);
    return groups;
}

std::uint64_t latent_upsampler_weight_bytes(const LatentUpsamplerConfig & c, at::ScalarType dtype) {
    std::uint64_t n = 0;
    for (const auto & [name, shape] : latent_upsampler_specs(c)) {
        std::uint64_t e = 1;
        for (auto d : shape) e *= std::uint64_t(d);
        n += e;
    }
    return n * std::uint64_t(c10::elementSize(dtype));
}

}  // namespace ddo::ltx2
