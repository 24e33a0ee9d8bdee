// An LTX-2 (audio+video) checkpoint in diffusers layout, opened and checked before anything is computed: every
// component's config.json parsed, every component's tensors checked against its config from the headers alone
// (names, shapes, floating dtypes: RuntimeError naming tensor and file, exit 4), and the cross-component facts the
// pipeline relies on (the connectors' widths are the DiT's text widths, the audio VAE's latent features are the
// DiT's audio channels, the vocoder reads the audio VAE's mel) so that a mixed checkpoint fails here, not mid-run.
#pragma once

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "audio_vae_config.hpp"
#include "connectors.hpp"
#include "ddo/model/flow_match.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latents.hpp"
#include "transformer_config.hpp"
#include "video_vae_config.hpp"
#include "vocoder_config.hpp"

namespace ddo::ltx2 {

struct VideoModel {
    std::filesystem::path dir;
    TransformerConfig transformer_config;
    ConnectorsConfig connectors_config;
    VideoVaeConfig vae_config;
    AudioVaeConfig audio_vae_config;
    VocoderKind vocoder_kind = VocoderKind::hifigan;
    std::optional<VocoderConfig> vocoder_config;         // LTX2Vocoder
    std::optional<VocoderBweConfig> vocoder_bwe_config;  // LTX2VocoderWithBWE
    model::FlowMatchConfig scheduler_config;
    nlohmann::json scheduler_json;                       // for LTX2Pipeline's .get(key, default) reads
    model::TensorFile transformer, connectors, vae, audio_vae, vocoder;

    // The latent ratios of prepare_latents / prepare_audio_latents, from the configs.
    LatentRatios ratios() const;
    int64_t vocoder_sample_rate() const;

    // Throws UsageError (a config this code does not implement, naming file and key) or RuntimeError (a tensor
    // missing, of the wrong shape or dtype, or components that contradict each other, naming tensor and file).
    // transformer: <model_dir>/transformer, or a file replacing its weights (--transformer FILE, Note [Component files]).
    static VideoModel open(const std::filesystem::path & model_dir, const store::ComponentSource & transformer);
    static VideoModel open(const std::filesystem::path & model_dir) { return open(model_dir, model_dir / "transformer"); }
    // The decode stages only (--decode-latents): vae, audio_vae and vocoder opened and checked as open() checks
    // them, the vocoder against the audio VAE's mel; the transformer, connectors and scheduler are not read
    // (transformer_config, connectors_config and scheduler_* stay default, their TensorFiles empty).
    static VideoModel open_decoders(const std::filesystem::path & model_dir);
};

}  // namespace ddo::ltx2
