// LTX-2 audio decode chain parity against diffusers fixtures (tools/reference/ltx2_audio_fixtures.py): audio VAE
// decode (crop / pad to 4L-3 frames and mel_bins) -> HiFi-GAN vocoder (LTX-2.0) -> BWE vocoder (LTX-2.3: stage-1
// waveform, causal STFT log-mel, 48 kHz output) -> the pipeline's chain packed latents -> de-normalised latents ->
// mel -> waveform; plus config parsing and checkpoint errors (missing tensor, wrong shape) naming tensor and file.
// Tolerances (fp32, CPU): mel and waveform max abs 1e-4; packing / de-normalisation 1e-6; the computed Hann-sinc
// resampler filter 1e-7; the same chain in bf16 against the fp32 reference 0.05 (waveforms are bounded by 1).
// Scope test: every tensor is read inside the scope of its execution group, as EngineWeights requires.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "audio_vae_config.hpp"
#include "audio_vae_decoder.hpp"
#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "vocoder.hpp"
#include "vocoder_bwe.hpp"
#include "vocoder_config.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = LTX2_AUDIO_FIXTURE_DIR;
constexpr double kWaveTol = 1e-4;
constexpr double kMelTol = 1e-4;
constexpr double kPackTol = 1e-6;

using ddo::test::error_of;
using ddo::test::expect_close;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_audio_fixtures"); }

class Ltx2Audio : public ddo::test::ParitySuite {
protected:
    Ltx2Audio() : ParitySuite(kDir, "ltx2_audio_fixtures") {}
};

TensorFile fixture(const std::string & name) { return TensorFile::open_file(kDir / name); }

// A component of the fixture set, read resident in fp32 on the CPU.
struct Component {
    explicit Component(const std::string & name) : file(TensorFile::open_component(kDir / name)) {}
    TensorFile file;
    lt::ResidentWeights weights{file, at::kFloat, at::Device(at::kCPU)};
};

nlohmann::json config_json(const fs::path & dir) {
    std::ifstream in(dir / "config.json");
    return nlohmann::json::parse(in);
}

// Every tensor of `file` whose name starts with one of `prefixes`.
std::set<std::string> names_under(const TensorFile & file, const std::vector<std::string> & prefixes) {
    std::set<std::string> out;
    for (const auto & n : file.names()) {
        for (const auto & p : prefixes) {
            if (n.rfind(p, 0) == 0) out.insert(n);
        }
    }
    return out;
}

// The engine's contract over a resident source: get() succeeds only inside an open scope whose execution group
// holds the tensor (EngineWeights throws otherwise). Records what the math did instead of throwing.
class ScopeCheckingWeights final : public lt::Weights {
public:
    ScopeCheckingWeights(lt::Weights & inner, std::vector<ddo::model::GroupSpec> groups)
        : inner_(inner), groups_(std::move(groups)) {}
    at::Tensor get(const std::string & name) override {
        bool held = false;
        for (auto i : open_) {
            const auto & t = groups_[i].tensors;
            held = held || std::find(t.begin(), t.end(), name) != t.end();
        }
        if (!held) outside.push_back(name);
        return inner_.get(name);
    }
    bool contains(const std::string & name) const override { return inner_.contains(name); }
    at::Device device() const override { return inner_.device(); }
    at::ScalarType dtype() const override { return inner_.dtype(); }

    std::vector<std::string> outside;   // tensors read outside their group's scope
    std::vector<std::string> unknown;   // scopes that name no group
    std::set<std::string> entered;      // groups acquired at least once

protected:
    void enter(const std::string & module) override {
        for (std::size_t i = 0; i < groups_.size(); ++i) {
            if (groups_[i].name == module) {
                open_.push_back(i);
                entered.insert(module);
                return;
            }
        }
        unknown.push_back(module);
    }
    void leave(const std::string & module) override {
        for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
            if (groups_[*it].name == module) {
                open_.erase(std::next(it).base());
                return;
            }
        }
    }

private:
    lt::Weights & inner_;
    std::vector<ddo::model::GroupSpec> groups_;
    std::vector<std::size_t> open_;
};

void expect_scopes_match_groups(const std::string & what, const ScopeCheckingWeights & w,
                                const std::vector<ddo::model::GroupSpec> & groups) {
    EXPECT_TRUE(w.outside.empty()) << what << ": read outside its group's scope: " << w.outside.front();
    EXPECT_TRUE(w.unknown.empty()) << what << ": scope names no group: " << w.unknown.front();
    for (const auto & g : groups) EXPECT_TRUE(w.entered.count(g.name)) << what << ": group never acquired: " << g.name;
}

}  // namespace

TEST_F(Ltx2Audio, AudioVaeDecode) {
    auto f = fixture("audio_vae.safetensors");
    for (const auto & c : reference().at("audio_vae_cases")) {
        const auto name = c.at("name").get<std::string>();
        const auto ckpt = c.at("checkpoint").get<std::string>();
        const auto cfg = lt::AudioVaeConfig::from_dir(kDir / ckpt);
        Component comp(ckpt);
        lt::validate_audio_vae_decoder(comp.file, cfg);
        const lt::AudioVaeDecoder dec(cfg);
        const auto mel = dec.decode(comp.weights, f.read(name + ".latents"));
        expect_close("audio_vae " + name + " (" + ckpt + ") mel", mel, f.read(name + ".mel"), kMelTol);
    }
}

TEST_F(Ltx2Audio, AudioVaeSpecsAndGroupsCoverTheDecoder) {
    for (const std::string ckpt : {"audio_vae", "audio_vae_wide"}) {
        const auto cfg = lt::AudioVaeConfig::from_dir(kDir / ckpt);
        const auto file = TensorFile::open_component(kDir / ckpt);
        std::set<std::string> specs, grouped;
        for (const auto & s : lt::audio_vae_decoder_specs(cfg)) EXPECT_TRUE(specs.insert(s.name).second) << s.name;
        for (const auto & g : lt::audio_vae_decoder_groups(cfg)) {
            for (const auto & t : g.tensors) EXPECT_TRUE(grouped.insert(t).second) << t << " in two groups";
        }
        EXPECT_EQ(specs, grouped) << ckpt;
        EXPECT_EQ(specs, names_under(file, {"decoder.", "latents_"})) << ckpt << ": the decoder reads every tensor";
    }
}

TEST_F(Ltx2Audio, PackedDenormalisationAndUnpack) {
    auto f = fixture("chain.safetensors");
    const auto cfg = lt::AudioVaeConfig::from_dir(kDir / "audio_vae");
    Component vae("audio_vae");
    const auto packed = f.read("chain.packed");
    const auto latents =
        lt::unpack_audio_latents(lt::denormalize_audio_latents(vae.weights, packed), cfg.latent_mel_bins());
    expect_close("chain latents (de-normalised, unpacked)", latents, f.read("chain.latents"), kPackTol);
    EXPECT_TRUE(at::equal(lt::pack_audio_latents(lt::unpack_audio_latents(packed, cfg.latent_mel_bins())), packed));
    const auto mel = lt::AudioVaeDecoder(cfg).decode(vae.weights, latents);
    expect_close("chain mel", mel, f.read("chain.mel"), kMelTol);
}

// The waveform of one vocoder case (the class chosen from config.json's _class_name), with its sample rate.
struct Waveform {
    at::Tensor samples;
    int64_t sample_rate;
};

Waveform vocode(const std::string & ckpt, const at::Tensor & mel) {
    const auto dir = kDir / ckpt;
    const auto j = lt::read_vocoder_config(dir);
    Component comp(ckpt);
    if (lt::vocoder_kind(j, dir / "config.json") == lt::VocoderKind::bwe) {
        const lt::VocoderWithBwe v(lt::VocoderBweConfig::from_json(j, dir / "config.json"));
        lt::validate_vocoder_bwe(comp.file, v.config());
        return {v.forward(comp.weights, mel), v.output_sampling_rate()};
    }
    const lt::Vocoder v(lt::VocoderConfig::from_json(j, dir / "config.json"));
    lt::validate_vocoder(comp.file, v.config());
    return {v.forward(comp.weights, mel), v.output_sampling_rate()};
}

TEST_F(Ltx2Audio, VocoderClassFromConfig) {
    for (const auto & c : reference().at("vocoder_cases")) {
        const auto ckpt = c.at("checkpoint").get<std::string>();
        const auto kind = lt::vocoder_kind(lt::read_vocoder_config(kDir / ckpt), kDir / ckpt / "config.json");
        EXPECT_EQ(kind == lt::VocoderKind::bwe, ckpt == "vocoder_bwe") << ckpt;
    }
}

TEST_F(Ltx2Audio, HifiGanVocoder) {
    auto f = fixture("vocoder.safetensors");
    for (const auto & c : reference().at("vocoder_cases")) {
        const auto name = c.at("name").get<std::string>();
        const auto ckpt = c.at("checkpoint").get<std::string>();
        if (ckpt == "vocoder_bwe") continue;
        const auto wave = vocode(ckpt, f.read(name + ".mel"));
        expect_close("vocoder " + name + " (" + ckpt + ") waveform", wave.samples, f.read(name + ".waveform"),
                     kWaveTol);
        EXPECT_EQ(wave.sample_rate, c.at("output_sampling_rate").get<int64_t>()) << name;
    }
}

TEST_F(Ltx2Audio, BweVocoderStages) {
    auto f = fixture("vocoder.safetensors");
    const auto dir = kDir / "vocoder_bwe";
    const lt::VocoderWithBwe v(lt::VocoderBweConfig::from_json(lt::read_vocoder_config(dir), dir / "config.json"));
    Component comp("vocoder_bwe");
    const auto stage1 = v.stage1().forward(comp.weights, f.read("bwe.mel"));
    expect_close("vocoder_bwe stage-1 waveform (16 kHz)", stage1, f.read("bwe.stage1"), kWaveTol);
    const int64_t hop = v.config().hop_length;
    const auto padded = at::constant_pad_nd(stage1, {0, (hop - stage1.size(2) % hop) % hop}, 0.0);
    ASSERT_NE(stage1.size(2) % hop, 0) << "the fixture must exercise the pad to a hop multiple";
    expect_close("vocoder_bwe causal STFT log-mel", v.log_mel(comp.weights, padded), f.read("bwe.log_mel"), kMelTol);
}

TEST_F(Ltx2Audio, BweVocoder) {
    auto f = fixture("vocoder.safetensors");
    for (const auto & c : reference().at("vocoder_cases")) {
        const auto name = c.at("name").get<std::string>();
        if (c.at("checkpoint").get<std::string>() != "vocoder_bwe") continue;
        const auto wave = vocode("vocoder_bwe", f.read(name + ".mel"));
        expect_close("vocoder_bwe " + name + " waveform (48 kHz)", wave.samples, f.read(name + ".waveform"), kWaveTol);
        EXPECT_EQ(wave.sample_rate, 48000);
    }
}

TEST_F(Ltx2Audio, ChainLatentsToWaveform) {
    auto f = fixture("chain.safetensors");
    const auto cfg = lt::AudioVaeConfig::from_dir(kDir / "audio_vae");
    Component vae("audio_vae");
    const auto latents =
        lt::unpack_audio_latents(lt::denormalize_audio_latents(vae.weights, f.read("chain.packed")), cfg.latent_mel_bins());
    const auto mel = lt::AudioVaeDecoder(cfg).decode(vae.weights, latents);
    expect_close("chain waveform (vocoder)", vocode("vocoder", mel).samples, f.read("chain.waveform"), kWaveTol);
    expect_close("chain waveform (vocoder_bwe)", vocode("vocoder_bwe", mel).samples, f.read("chain.waveform_bwe"),
                 kWaveTol);
}

TEST_F(Ltx2Audio, ScopesOpenTheGroupsTheyRead) {
    // The lead's pipeline reads these components through EngineWeights: every tensor must be read inside the scope
    // of its execution group, and every group must be used.
    auto f = fixture("chain.safetensors");
    const auto cfg = lt::AudioVaeConfig::from_dir(kDir / "audio_vae_wide");
    Component vae("audio_vae_wide");
    const auto vae_groups = lt::audio_vae_decoder_groups(cfg);
    ScopeCheckingWeights vw(vae.weights, vae_groups);
    const auto packed = at::randn({1, 3, cfg.packed_features()});
    lt::AudioVaeDecoder(cfg).decode(vw, lt::unpack_audio_latents(lt::denormalize_audio_latents(vw, packed),
                                                                 cfg.latent_mel_bins()));
    expect_scopes_match_groups("audio_vae_wide", vw, vae_groups);

    const auto mel = f.read("chain.mel").slice(0, 0, 1).slice(2, 0, 3);
    for (const std::string ckpt : {"vocoder_wide", "vocoder_snake"}) {
        const auto dir = kDir / ckpt;
        const auto vcfg = lt::VocoderConfig::from_json(lt::read_vocoder_config(dir), dir / "config.json");
        Component comp(ckpt);
        const auto groups = lt::vocoder_groups(vcfg);
        ScopeCheckingWeights w(comp.weights, groups);
        lt::Vocoder(vcfg).forward(w, mel);
        expect_scopes_match_groups(ckpt, w, groups);
    }
    const auto dir = kDir / "vocoder_bwe";
    const auto bcfg = lt::VocoderBweConfig::from_json(lt::read_vocoder_config(dir), dir / "config.json");
    Component comp("vocoder_bwe");
    const auto groups = lt::vocoder_bwe_groups(bcfg);
    ScopeCheckingWeights w(comp.weights, groups);
    lt::VocoderWithBwe(bcfg).forward(w, mel);
    expect_scopes_match_groups("vocoder_bwe", w, groups);
}

TEST_F(Ltx2Audio, ChainRunsInBfloat16) {
    // The same code in bf16 (the CUDA compute dtype; here on the CPU): no dtype mismatch, close to the fp32
    // reference. Tolerance: bf16 has 8 mantissa bits; 0.05 on waveforms bounded by 1.
    auto f = fixture("chain.safetensors");
    const auto cfg = lt::AudioVaeConfig::from_dir(kDir / "audio_vae");
    const auto vae_file = TensorFile::open_component(kDir / "audio_vae");
    lt::ResidentWeights vae(vae_file, at::kBFloat16, at::Device(at::kCPU));
    const auto packed = f.read("chain.packed").slice(0, 0, 1);
    const auto latents = lt::unpack_audio_latents(lt::denormalize_audio_latents(vae, packed), cfg.latent_mel_bins());
    const auto mel = lt::AudioVaeDecoder(cfg).decode(vae, latents);
    EXPECT_EQ(mel.scalar_type(), at::kBFloat16);
    const auto dir = kDir / "vocoder_bwe";
    const auto bcfg = lt::VocoderBweConfig::from_json(lt::read_vocoder_config(dir), dir / "config.json");
    const auto voc_file = TensorFile::open_component(dir);
    lt::ResidentWeights voc(voc_file, at::kBFloat16, at::Device(at::kCPU));
    const auto wave = lt::VocoderWithBwe(bcfg).forward(voc, mel);
    EXPECT_EQ(wave.scalar_type(), at::kBFloat16);
    expect_close("chain waveform (vocoder_bwe) in bf16 vs fp32 reference", wave,
                 f.read("chain.waveform_bwe").slice(0, 0, 1), 0.05);
}

TEST_F(Ltx2Audio, VocoderSpecsAndGroupsCoverTheCheckpoint) {
    for (const std::string ckpt : {"vocoder", "vocoder_wide", "vocoder_snake", "vocoder_bwe"}) {
        const auto dir = kDir / ckpt;
        const auto j = lt::read_vocoder_config(dir);
        std::vector<lt::AudioTensorSpec> specs;
        std::vector<ddo::model::GroupSpec> groups;
        if (lt::vocoder_kind(j, dir / "config.json") == lt::VocoderKind::bwe) {
            const auto cfg = lt::VocoderBweConfig::from_json(j, dir / "config.json");
            specs = lt::vocoder_bwe_specs(cfg);
            groups = lt::vocoder_bwe_groups(cfg);
        } else {
            const auto cfg = lt::VocoderConfig::from_json(j, dir / "config.json");
            specs = lt::vocoder_specs(cfg);
            groups = lt::vocoder_groups(cfg);
        }
        std::set<std::string> spec_names, grouped;
        for (const auto & s : specs) EXPECT_TRUE(spec_names.insert(s.name).second) << s.name;
        for (const auto & g : groups) {
            for (const auto & t : g.tensors) EXPECT_TRUE(grouped.insert(t).second) << t << " in two groups";
        }
        EXPECT_EQ(spec_names, grouped) << ckpt;
        auto stored = names_under(TensorFile::open_component(dir), {""});
        stored.erase("mel_stft.stft_fn.inverse_basis");  // the inverse STFT is not used by the forward
        EXPECT_EQ(spec_names, stored) << ckpt << ": the vocoder reads every tensor";
    }
}

TEST_F(Ltx2Audio, HannResampleFilterIsTheReferences) {
    // The BWE resampler's filter is a non-persistent buffer (not in the checkpoint): computed here, exported there.
    expect_close("vocoder_bwe Hann-sinc x3 resample filter", lt::hann_sinc_resample_filter(3),
                 fixture("vocoder.safetensors").read("bwe.resample_filter"), 1e-7);
}

std::string act_name(lt::VocoderActivation a) {
    switch (a) {
        case lt::VocoderActivation::leaky_relu: return "leaky_relu";
        case lt::VocoderActivation::snake: return "snake";
        case lt::VocoderActivation::snakebeta: return "snakebeta";
    }
    return "?";
}

nlohmann::json final_act_json(lt::VocoderFinalActivation a) {
    switch (a) {
        case lt::VocoderFinalActivation::tanh: return "tanh";
        case lt::VocoderFinalActivation::clamp: return "clamp";
        case lt::VocoderFinalActivation::none: break;
    }
    return nullptr;
}

// One generator's fields against the reference class's defaults (keys prefixed by `p`).
void expect_generator_defaults(const lt::VocoderConfig & c, const nlohmann::json & d, const std::string & p) {
    EXPECT_EQ(c.in_channels, d.at(p + "in_channels").get<int64_t>()) << p;
    EXPECT_EQ(c.hidden_channels, d.at(p + "hidden_channels").get<int64_t>()) << p;
    EXPECT_EQ(c.out_channels, d.at(p + "out_channels").get<int64_t>()) << p;
    EXPECT_EQ(c.upsample_kernel_sizes, d.at(p + "upsample_kernel_sizes").get<std::vector<int64_t>>()) << p;
    EXPECT_EQ(c.upsample_factors, d.at(p + "upsample_factors").get<std::vector<int64_t>>()) << p;
    EXPECT_EQ(c.resnet_kernel_sizes, d.at(p + "resnet_kernel_sizes").get<std::vector<int64_t>>()) << p;
    EXPECT_EQ(c.resnet_dilations, d.at(p + "resnet_dilations").get<std::vector<std::vector<int64_t>>>()) << p;
    EXPECT_EQ(act_name(c.act_fn), d.at(p + "act_fn").get<std::string>()) << p;
    EXPECT_EQ(c.leaky_relu_negative_slope, d.at(p + "leaky_relu_negative_slope").get<double>()) << p;
    EXPECT_EQ(c.antialias, d.at(p + "antialias").get<bool>()) << p;
    EXPECT_EQ(c.antialias_ratio, d.at(p + "antialias_ratio").get<int64_t>()) << p;
    EXPECT_EQ(c.antialias_kernel_size, d.at(p + "antialias_kernel_size").get<int64_t>()) << p;
    EXPECT_EQ(final_act_json(c.final_act_fn), d.at(p + "final_act_fn")) << p;
    EXPECT_EQ(c.final_bias, d.at(p + "final_bias").get<bool>()) << p;
}

TEST_F(Ltx2Audio, ConfigDefaultsAreTheReferenceClasses) {
    const auto & d = reference().at("defaults");
    const fs::path file = "defaults.json";
    const auto voc = lt::VocoderConfig::from_json({{"_class_name", "LTX2Vocoder"}}, file);
    expect_generator_defaults(voc, d.at("LTX2Vocoder"), "");
    EXPECT_EQ(voc.output_sampling_rate, d.at("LTX2Vocoder").at("output_sampling_rate").get<int64_t>());

    const auto & bd = d.at("LTX2VocoderWithBWE");
    const auto bwe = lt::VocoderBweConfig::from_json({{"_class_name", "LTX2VocoderWithBWE"}}, file);
    expect_generator_defaults(bwe.vocoder, bd, "");
    expect_generator_defaults(bwe.bwe, bd, "bwe_");
    EXPECT_EQ(bwe.filter_length, bd.at("filter_length").get<int64_t>());
    EXPECT_EQ(bwe.hop_length, bd.at("hop_length").get<int64_t>());
    EXPECT_EQ(bwe.window_length, bd.at("window_length").get<int64_t>());
    EXPECT_EQ(bwe.num_mel_channels, bd.at("num_mel_channels").get<int64_t>());
    EXPECT_EQ(bwe.input_sampling_rate, bd.at("input_sampling_rate").get<int64_t>());
    EXPECT_EQ(bwe.output_sampling_rate, bd.at("output_sampling_rate").get<int64_t>());
    EXPECT_EQ(bwe.vocoder.output_sampling_rate, bwe.input_sampling_rate);

    const auto & ad = d.at("AutoencoderKLLTX2Audio");
    const auto vae = lt::AudioVaeConfig::from_json(nlohmann::json::object(), file);
    EXPECT_EQ(vae.base_channels, ad.at("base_channels").get<int64_t>());
    EXPECT_EQ(vae.output_channels, ad.at("output_channels").get<int64_t>());
    EXPECT_EQ(vae.ch_mult, ad.at("ch_mult").get<std::vector<int64_t>>());
    EXPECT_EQ(vae.num_res_blocks, ad.at("num_res_blocks").get<int64_t>());
    EXPECT_EQ(vae.latent_channels, ad.at("latent_channels").get<int64_t>());
    EXPECT_EQ(vae.mel_bins, ad.at("mel_bins").get<int64_t>());
    EXPECT_EQ(vae.sample_rate, ad.at("sample_rate").get<int64_t>());
    EXPECT_EQ(vae.mel_hop_length, ad.at("mel_hop_length").get<int64_t>());
    EXPECT_EQ(ad.at("norm_type"), "pixel");
    EXPECT_EQ(ad.at("causality_axis"), "height");
}

TEST_F(Ltx2Audio, VocoderConfigRejectsUnsupportedValues) {
    const fs::path file = kDir / "vocoder_bwe" / "config.json";
    const auto base = lt::read_vocoder_config(kDir / "vocoder_bwe");
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"_class_name", "LTX2Vocoder3"},
             {"act_fn", "gelu"},
             {"bwe_final_act_fn", "sigmoid"},
             {"upsample_factors", nlohmann::json::array({3})},
             {"bwe_upsample_factors", nlohmann::json::array({3, 2, 3})},
             {"window_length", 8},
             {"output_sampling_rate", 44100},
             {"bwe_in_channels", 12}}) {
        auto j = base;
        j[key] = value;
        const auto e = error_of([&] {
            lt::vocoder_kind(j, file);
            lt::VocoderBweConfig::from_json(j, file);
        });
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << key << ": " << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    }
    const auto as_plain = error_of([&] { lt::VocoderConfig::from_json(base, file); });
    EXPECT_NE(as_plain.find("'_class_name'"), std::string::npos) << "a BWE config read as LTX2Vocoder: " << as_plain;
    auto j = lt::read_vocoder_config(kDir / "vocoder");
    j["antialias"] = true;  // with leaky_relu: diffusers nests the anti-aliasing; refused
    const auto e = error_of([&] { lt::VocoderConfig::from_json(j, kDir / "vocoder" / "config.json"); });
    EXPECT_NE(e.find("'antialias'"), std::string::npos) << e;
}

TEST_F(Ltx2Audio, AudioVaeConfigRejectsUnsupportedValues) {
    const fs::path file = kDir / "audio_vae" / "config.json";
    const auto base = config_json(kDir / "audio_vae");
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"norm_type", "group"},
             {"causality_axis", "width"},
             {"mid_block_add_attention", true},
             {"attn_resolutions", nlohmann::json::array({16})},
             {"mel_bins", nullptr},
             {"ch_mult", "wide"}}) {
        auto j = base;
        j[key] = value;
        const auto e = error_of([&] { lt::AudioVaeConfig::from_json(j, file); });
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << key << ": " << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    }
}

TEST_F(Ltx2Audio, CheckpointErrorsNameTensorAndFile) {
    for (const auto & b : reference().at("broken")) {
        const auto name = b.at("name").get<std::string>();
        const auto source = b.at("source").get<std::string>();
        const auto dir = kDir / "broken" / name;
        const auto file = TensorFile::open_component(dir);
        const auto e = error_of([&] {
            if (source == "audio_vae") {
                lt::validate_audio_vae_decoder(file, lt::AudioVaeConfig::from_dir(dir));
            } else {
                lt::validate_vocoder_bwe(file, lt::VocoderBweConfig::from_json(lt::read_vocoder_config(dir),
                                                                               dir / "config.json"));
            }
        });
        std::cout << "[ error     ] " << name << ": " << e << "\n";
        EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
        EXPECT_NE(e.find(b.at("tensor").get<std::string>()), std::string::npos) << e;
        EXPECT_NE(e.find("diffusion_pytorch_model.safetensors"), std::string::npos) << e;
    }
}
