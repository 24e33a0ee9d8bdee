// vocoder/config.json -> VocoderConfig / VocoderBweConfig (reference: LTX2Vocoder.__init__ and
// LTX2VocoderWithBWE.__init__ in diffusers/pipelines/ltx2/vocoder.py: defaults, checks, how the BWE builds its two
// generators).
#include "vocoder_config.hpp"

#include <fstream>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

template <class T>
void read(const nlohmann::json & j, const std::string & key, T & out, const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it == j.end()) return;  // diffusers' default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw UsageError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                         "); fix the config or re-export the checkpoint with diffusers");
    }
}

[[noreturn]] void reject(const std::filesystem::path & file, const std::string & key, const std::string & what) {
    throw UsageError(file.string() + ": key '" + key + "': " + what +
                     "; the LTX-2 vocoders support the configs of the released LTX-2 checkpoints");
}

void require(bool ok, const std::filesystem::path & file, const std::string & key, const std::string & what) {
    if (!ok) reject(file, key, what);
}

// The generator keys of LTX2Vocoder, each prefixed by `p` ("" or "bwe_"), over the defaults in `c`.
VocoderConfig read_generator(const nlohmann::json & j, const std::filesystem::path & file, const std::string & p,
                             VocoderConfig c) {
    read(j, p + "in_channels", c.in_channels, file);
    read(j, p + "hidden_channels", c.hidden_channels, file);
    read(j, p + "out_channels", c.out_channels, file);
    read(j, p + "upsample_kernel_sizes", c.upsample_kernel_sizes, file);
    read(j, p + "upsample_factors", c.upsample_factors, file);
    read(j, p + "resnet_kernel_sizes", c.resnet_kernel_sizes, file);
    read(j, p + "resnet_dilations", c.resnet_dilations, file);
    read(j, p + "leaky_relu_negative_slope", c.leaky_relu_negative_slope, file);
    read(j, p + "antialias", c.antialias, file);
    read(j, p + "antialias_ratio", c.antialias_ratio, file);
    read(j, p + "antialias_kernel_size", c.antialias_kernel_size, file);
    read(j, p + "final_bias", c.final_bias, file);

    if (const auto it = j.find(p + "act_fn"); it != j.end()) {
        std::string act;
        read(j, p + "act_fn", act, file);
        if (act == "leaky_relu") c.act_fn = VocoderActivation::leaky_relu;
        else if (act == "snake") c.act_fn = VocoderActivation::snake;
        else if (act == "snakebeta") c.act_fn = VocoderActivation::snakebeta;
        else reject(file, p + "act_fn", "\"" + act + "\" is not one of leaky_relu, snake, snakebeta");
    }
    if (const auto it = j.find(p + "final_act_fn"); it != j.end()) {
        if (it->is_null()) {
            c.final_act_fn = VocoderFinalActivation::none;
        } else {
            std::string act;
            read(j, p + "final_act_fn", act, file);
            if (act == "tanh") c.final_act_fn = VocoderFinalActivation::tanh;
            else if (act == "clamp") c.final_act_fn = VocoderFinalActivation::clamp;
            else reject(file, p + "final_act_fn", "\"" + act + "\" is not one of tanh, clamp, null");
        }
    }

    require(c.in_channels > 0, file, p + "in_channels", "must be positive");
    require(c.out_channels > 0, file, p + "out_channels", "must be positive");
    require(!c.upsample_factors.empty() && c.upsample_factors.size() == c.upsample_kernel_sizes.size(), file,
            p + "upsample_factors", "must be a non-empty list as long as upsample_kernel_sizes");
    for (std::size_t i = 0; i < c.stages(); ++i) {
        require(c.upsample_factors[i] > 0 && c.upsample_kernel_sizes[i] >= c.upsample_factors[i], file,
                p + "upsample_kernel_sizes", "each kernel must be at least its upsample factor (> 0)");
    }
    require(c.hidden_channels > 0 && c.stages() < 63 && c.stage_channels(c.stages() - 1) > 0, file,
            p + "hidden_channels", "must stay positive when halved once per upsampler");
    require(!c.resnet_kernel_sizes.empty() && c.resnet_kernel_sizes.size() == c.resnet_dilations.size(), file,
            p + "resnet_dilations", "must be a non-empty list as long as resnet_kernel_sizes");
    for (std::size_t r = 0; r < c.resnet_kernel_sizes.size(); ++r) {
        require(c.resnet_kernel_sizes[r] > 0, file, p + "resnet_kernel_sizes", "entries must be positive");
        require(!c.resnet_dilations[r].empty(), file, p + "resnet_dilations", "entries must not be empty");
        for (auto d : c.resnet_dilations[r]) require(d > 0, file, p + "resnet_dilations", "must be positive");
    }
    // diffusers' ResBlock wraps the same LeakyReLU module again for every conv of its second list when antialias is
    // on (nested anti-aliasing); no LTX-2 checkpoint uses that combination.
    require(!(c.antialias && c.act_fn == VocoderActivation::leaky_relu), file, p + "antialias",
            "true with act_fn leaky_relu is not supported");
    if (c.snake()) {
        require(c.antialias_ratio > 0 && c.antialias_kernel_size >= c.antialias_ratio, file,
                p + "antialias_kernel_size", "must be at least antialias_ratio (> 0)");
    }
    return c;
}

// A config of another class must not be read as this one (a BWE config read as a plain vocoder would lose its
// bandwidth extender).
void require_class(const nlohmann::json & j, const std::filesystem::path & file, const std::string & expected) {
    const auto it = j.find("_class_name");
    require(it == j.end() || (it->is_string() && it->get<std::string>() == expected), file, "_class_name",
            "is " + (it == j.end() ? std::string("absent") : it->dump()) + ", this reader is for " + expected);
}

}  // namespace

int64_t VocoderConfig::upsample_factor() const {
    int64_t f = 1;
    for (auto u : upsample_factors) f *= u;
    return f;
}

VocoderConfig VocoderConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    require_class(j, file, "LTX2Vocoder");
    auto c = read_generator(j, file, "", VocoderConfig{});
    read(j, "output_sampling_rate", c.output_sampling_rate, file);
    require(c.output_sampling_rate > 0, file, "output_sampling_rate", "must be positive");
    return c;
}

VocoderBweConfig VocoderBweConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    require_class(j, file, "LTX2VocoderWithBWE");
    VocoderBweConfig c;
    // LTX2VocoderWithBWE.__init__ defaults: the stage-1 generator, then the bandwidth extender.
    VocoderConfig stage1;
    stage1.hidden_channels = 1536;
    stage1.upsample_kernel_sizes = {11, 4, 4, 4, 4, 4};
    stage1.upsample_factors = {5, 2, 2, 2, 2, 2};
    stage1.act_fn = VocoderActivation::snakebeta;
    stage1.antialias = true;
    stage1.final_act_fn = VocoderFinalActivation::none;
    stage1.final_bias = false;
    VocoderConfig bwe = stage1;
    bwe.hidden_channels = 512;
    bwe.upsample_kernel_sizes = {12, 11, 4, 4, 4};
    bwe.upsample_factors = {6, 5, 2, 2, 2};
    c.vocoder = read_generator(j, file, "", stage1);
    c.bwe = read_generator(j, file, "bwe_", bwe);
    read(j, "filter_length", c.filter_length, file);
    read(j, "hop_length", c.hop_length, file);
    read(j, "window_length", c.window_length, file);
    read(j, "num_mel_channels", c.num_mel_channels, file);
    read(j, "input_sampling_rate", c.input_sampling_rate, file);
    read(j, "output_sampling_rate", c.output_sampling_rate, file);
    c.vocoder.output_sampling_rate = c.input_sampling_rate;
    c.bwe.output_sampling_rate = c.output_sampling_rate;

    require(c.filter_length > 0 && c.hop_length > 0 && c.num_mel_channels > 0, file, "filter_length",
            "filter_length, hop_length and num_mel_channels must be positive");
    require(c.window_length == c.filter_length, file, "window_length",
            "must equal filter_length (the BWE residual and the resampled skip must have one length)");
    require(c.window_length >= c.hop_length, file, "hop_length", "must not exceed window_length");
    require(c.input_sampling_rate > 0 && c.output_sampling_rate >= c.input_sampling_rate &&
                c.output_sampling_rate % c.input_sampling_rate == 0,
            file, "output_sampling_rate", "must be a positive multiple of input_sampling_rate");
    require(c.bwe.in_channels == c.vocoder.out_channels * c.num_mel_channels, file, "bwe_in_channels",
            "must be out_channels * num_mel_channels = " + std::to_string(c.vocoder.out_channels * c.num_mel_channels));
    require(c.bwe.out_channels == c.vocoder.out_channels, file, "bwe_out_channels", "must equal out_channels");
    require(c.bwe.upsample_factor() == c.resample_ratio() * c.hop_length, file, "bwe_upsample_factors",
            "their product must be (output_sampling_rate / input_sampling_rate) * hop_length = " +
                std::to_string(c.resample_ratio() * c.hop_length));
    return c;
}

VocoderKind vocoder_kind(const nlohmann::json & j, const std::filesystem::path & file) {
    const auto it = j.find("_class_name");
    require(it != j.end() && it->is_string(), file, "_class_name",
            "missing: a diffusers vocoder config names its class (LTX2Vocoder or LTX2VocoderWithBWE)");
    const auto name = it->get<std::string>();
    if (name == "LTX2Vocoder") return VocoderKind::hifigan;
    if (name == "LTX2VocoderWithBWE") return VocoderKind::bwe;
    reject(file, "_class_name", "\"" + name + "\" is not LTX2Vocoder or LTX2VocoderWithBWE");
}

nlohmann::json read_vocoder_config(const std::filesystem::path & component_dir) {
    const auto file = component_dir / "config.json";
    std::ifstream in(file);
    if (!in) throw RuntimeError(file.string() + ": cannot be read; the checkpoint's vocoder/ folder needs its config.json");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": not valid JSON (" + e.what() + "); re-export the checkpoint");
    }
}

}  // namespace ddo::ltx2
