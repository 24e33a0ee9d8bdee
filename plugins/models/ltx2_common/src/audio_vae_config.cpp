// audio_vae/config.json -> AudioVaeConfig (reference: AutoencoderKLLTX2Audio.__init__ defaults and checks).
#include "audio_vae_config.hpp"

#include <fstream>

#include "ddo/error.hpp"

namespace ddo::ltx2 {
namespace {

template <class T>
void read(const nlohmann::json & j, const char * key, T & out, const std::filesystem::path & file) {
    const auto it = j.find(key);
    if (it == j.end()) return;  // diffusers' default applies
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception & e) {
        throw UsageError(file.string() + ": key '" + key + "' has the wrong type (" + e.what() +
                         "); fix the config or re-export the checkpoint with diffusers");
    }
}

void require(bool ok, const std::filesystem::path & file, const std::string & key, const std::string & what) {
    if (!ok) {
        throw UsageError(file.string() + ": key '" + key + "': " + what +
                         "; the LTX-2 audio VAE decoder supports the configs of the released LTX-2 checkpoints");
    }
}

std::string dump(const nlohmann::json & j, const char * key) { return j.contains(key) ? j.at(key).dump() : "absent"; }

}  // namespace

AudioVaeConfig AudioVaeConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    AudioVaeConfig c;
    read(j, "base_channels", c.base_channels, file);
    read(j, "output_channels", c.output_channels, file);
    read(j, "ch_mult", c.ch_mult, file);
    read(j, "num_res_blocks", c.num_res_blocks, file);
    read(j, "latent_channels", c.latent_channels, file);
    read(j, "sample_rate", c.sample_rate, file);
    read(j, "mel_hop_length", c.mel_hop_length, file);
    require(!j.contains("mel_bins") || !j.at("mel_bins").is_null(), file, "mel_bins",
            "null (the input's mel width) is not supported: the pipeline unpacks latents with mel_bins / 4");
    read(j, "mel_bins", c.mel_bins, file);

    std::string norm = "pixel", causality = "height";
    read(j, "norm_type", norm, file);
    require(norm == "pixel", file, "norm_type", "\"" + norm + "\" is not supported (only \"pixel\")");
    read(j, "causality_axis", causality, file);
    require(causality == "height", file, "causality_axis",
            "\"" + causality + "\" is not supported (only \"height\": causal along time)");
    bool mid_attention = false;
    read(j, "mid_block_add_attention", mid_attention, file);
    require(!mid_attention, file, "mid_block_add_attention", "true is not supported (only false)");
    const auto attn = j.find("attn_resolutions");
    require(attn == j.end() || attn->is_null() || (attn->is_array() && attn->empty()), file, "attn_resolutions",
            "attention blocks are not supported (got " + dump(j, "attn_resolutions") + "; only null)");

    require(c.base_channels > 0, file, "base_channels", "must be positive");
    require(!c.ch_mult.empty(), file, "ch_mult", "must not be empty");
    for (auto m : c.ch_mult) require(m > 0, file, "ch_mult", "entries must be positive");
    require(c.num_res_blocks > 0, file, "num_res_blocks", "must be positive");
    require(c.latent_channels > 0, file, "latent_channels", "must be positive");
    require(c.output_channels > 0, file, "output_channels", "must be positive");
    require(c.mel_bins > 0 && c.mel_bins % kLatentDownsample == 0, file, "mel_bins",
            "must be a positive multiple of " + std::to_string(kLatentDownsample) + " (got " +
                std::to_string(c.mel_bins) + ")");
    return c;
}

AudioVaeConfig AudioVaeConfig::from_dir(const std::filesystem::path & component_dir) {
    const auto file = component_dir / "config.json";
    std::ifstream in(file);
    if (!in) throw RuntimeError(file.string() + ": cannot be read; the checkpoint's audio_vae/ folder needs its config.json");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(file.string() + ": not valid JSON (" + e.what() + "); re-export the checkpoint");
    }
    return from_json(j, file);
}

}  // namespace ddo::ltx2
