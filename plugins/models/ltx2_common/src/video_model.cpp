#include "video_model.hpp"

#include <string>

#include "audio_vae_decoder.hpp"
#include "ddo/error.hpp"
#include "transformer.hpp"
#include "vocoder.hpp"
#include "vocoder_bwe.hpp"

namespace ddo::ltx2 {
namespace {

[[noreturn]] void contradiction(const std::filesystem::path & file, const std::string & what) {
    throw RuntimeError(file.string() + ": " + what +
                       "; the components come from different checkpoints: re-export the model with diffusers "
                       "save_pretrained");
}

}  // namespace

LatentRatios VideoModel::ratios() const {
    LatentRatios r;
    r.spatial = vae_config.spatial_compression_ratio;
    r.temporal = vae_config.temporal_compression_ratio;
    r.audio_temporal = AudioVaeConfig::kLatentDownsample;
    r.mel = AudioVaeConfig::kLatentDownsample;
    r.audio_sample_rate = audio_vae_config.sample_rate;
    r.hop_length = audio_vae_config.mel_hop_length;
    r.mel_bins = audio_vae_config.mel_bins;
    r.video_channels = vae_config.latent_channels;  // the transformer's in_channels (open() checks them equal)
    r.audio_channels = audio_vae_config.latent_channels;
    return r;
}

int64_t VideoModel::vocoder_sample_rate() const {
    return vocoder_bwe_config ? vocoder_bwe_config->output_sampling_rate : vocoder_config->output_sampling_rate;
}

namespace {

// The decoders' configs and files, checked (open and open_decoders).
void open_decoder_components(VideoModel & m, const std::filesystem::path & dir) {
    m.vae_config = VideoVaeConfig::load(dir / "vae");
    m.audio_vae_config = AudioVaeConfig::from_dir(dir / "audio_vae");
    const auto voc_json = read_vocoder_config(dir / "vocoder");
    const auto voc_file = dir / "vocoder" / "config.json";
    m.vocoder_kind = ltx2::vocoder_kind(voc_json, voc_file);
    if (m.vocoder_kind == VocoderKind::bwe) m.vocoder_bwe_config = VocoderBweConfig::from_json(voc_json, voc_file);
    else m.vocoder_config = VocoderConfig::from_json(voc_json, voc_file);
    m.vae = model::TensorFile::open_component(dir / "vae");
    m.audio_vae = model::TensorFile::open_component(dir / "audio_vae");
    m.vocoder = model::TensorFile::open_component(dir / "vocoder");
    validate_video_vae_checkpoint(m.vae, m.vae_config);
    validate_audio_vae_decoder(m.audio_vae, m.audio_vae_config);
    if (m.vocoder_bwe_config) validate_vocoder_bwe(m.vocoder, *m.vocoder_bwe_config);
    else validate_vocoder(m.vocoder, *m.vocoder_config);
    const int64_t mel_in = m.audio_vae_config.output_channels * m.audio_vae_config.mel_bins;
    const int64_t voc_in = m.vocoder_bwe_config ? m.vocoder_bwe_config->vocoder.in_channels : m.vocoder_config->in_channels;
    if (voc_in != mel_in)
        contradiction(voc_file, "in_channels " + std::to_string(voc_in) + " but the audio VAE decodes " +
                                    std::to_string(m.audio_vae_config.output_channels) + " x " +
                                    std::to_string(m.audio_vae_config.mel_bins) + " mel channels");
}

}  // namespace

VideoModel VideoModel::open_decoders(const std::filesystem::path & dir) {
    VideoModel m;
    m.dir = dir;
    open_decoder_components(m, dir);
    return m;
}

VideoModel VideoModel::open(const std::filesystem::path & dir, const store::ComponentSource & transformer) {
    VideoModel m;
    m.dir = dir;
    m.transformer_config = TransformerConfig::from_file(dir / "transformer" / "config.json");
    m.connectors_config = ConnectorsConfig::from_file(dir / "connectors" / "config.json");
    open_decoder_components(m, dir);
    const auto sched = dir / "scheduler" / "scheduler_config.json";
    m.scheduler_json = read_config_json(sched);
    m.scheduler_config = model::FlowMatchConfig::from_json(m.scheduler_json, sched);

    m.transformer = model::TensorFile::open_component(transformer);
    m.connectors = model::TensorFile::open_component(dir / "connectors");
    validate_transformer(m.transformer, m.transformer_config);
    validate_connectors(m.connectors, m.connectors_config);

    // What the pipeline feeds from one component into the next.
    const auto & t = m.transformer_config;
    const auto & c = m.connectors_config;
    const int64_t text_v = t.use_prompt_embeddings ? t.caption_channels : t.cross_attention_dim;
    const int64_t text_a = t.use_prompt_embeddings ? t.caption_channels : t.audio_cross_attention_dim;
    const int64_t conn_v = c.video.inner_dim(), conn_a = c.audio.inner_dim();
    if (conn_v != text_v || conn_a != text_a)
        contradiction(dir / "connectors" / "config.json",
                      "the connectors produce text of width " + std::to_string(conn_v) + " (video) / " +
                          std::to_string(conn_a) + " (audio) but the transformer reads " + std::to_string(text_v) +
                          " / " + std::to_string(text_a));
    if (m.vae_config.latent_channels != t.in_channels)
        contradiction(dir / "vae" / "config.json", "latent_channels " + std::to_string(m.vae_config.latent_channels) +
                                                       " but the transformer's in_channels is " +
                                                       std::to_string(t.in_channels));
    if (m.audio_vae_config.packed_features() != t.audio_in_channels)
        contradiction(dir / "audio_vae" / "config.json",
                      "latent_channels x mel_bins/4 = " + std::to_string(m.audio_vae_config.packed_features()) +
                          " packed features but the transformer's audio_in_channels is " +
                          std::to_string(t.audio_in_channels));
    return m;
}

}  // namespace ddo::ltx2
