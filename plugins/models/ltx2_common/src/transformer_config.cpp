// LTX-2 DiT config.json parsing (reference: LTX2VideoTransformer3DModel.__init__ defaults, diffusers 0.42.1).
#include "transformer_config.hpp"

#include <fstream>

#include "ddo/error.hpp"

namespace ddo::ltx2 {

RopeType ConfigReader::rope_type(const char * key, RopeType fallback) const {
    std::string v = fallback == RopeType::split ? "split" : "interleaved";
    read(key, v);
    if (v == "interleaved") return RopeType::interleaved;
    if (v == "split") return RopeType::split;
    fail(key, "is '" + v + "'; supported: 'interleaved', 'split'");
}

void ConfigReader::fail(const std::string & key, const std::string & what) const {
    throw UsageError(file_.string() + ": key '" + key + "' " + what +
                     "; fix the checkpoint's config.json or re-export it with diffusers");
}

nlohmann::json read_config_json(const std::filesystem::path & config_json) {
    std::ifstream in(config_json);
    if (!in) throw RuntimeError(config_json.string() + ": cannot be read; check the checkpoint folder");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception & e) {
        throw RuntimeError(config_json.string() + ": not valid JSON (" + e.what() + "); re-export the checkpoint");
    }
}

namespace {

void read_video_stream(const ConfigReader & r, TransformerConfig & c) {
    r.read("in_channels", c.in_channels);
    c.out_channels = c.in_channels;  // out_channels=None -> in_channels
    r.read("out_channels", c.out_channels);
    r.read("patch_size", c.patch_size);
    r.read("patch_size_t", c.patch_size_t);
    r.read("num_attention_heads", c.num_attention_heads);
    r.read("attention_head_dim", c.attention_head_dim);
    r.read("cross_attention_dim", c.cross_attention_dim);
    r.read("vae_scale_factors", c.vae_scale_factors);
    r.read("pos_embed_max_pos", c.pos_embed_max_pos);
    r.read("base_height", c.base_height);
    r.read("base_width", c.base_width);
    r.read("gated_attn", c.gated_attn);
    r.read("cross_attn_mod", c.cross_attn_mod);
}

void read_audio_stream(const ConfigReader & r, TransformerConfig & c) {
    r.read("audio_in_channels", c.audio_in_channels);
    c.audio_out_channels = c.audio_in_channels;
    r.read("audio_out_channels", c.audio_out_channels);
    r.read("audio_patch_size_t", c.audio_patch_size_t);
    r.read("audio_num_attention_heads", c.audio_num_attention_heads);
    r.read("audio_attention_head_dim", c.audio_attention_head_dim);
    r.read("audio_cross_attention_dim", c.audio_cross_attention_dim);
    r.read("audio_scale_factor", c.audio_scale_factor);
    r.read("audio_pos_embed_max_pos", c.audio_pos_embed_max_pos);
    r.read("audio_sampling_rate", c.audio_sampling_rate);
    r.read("audio_hop_length", c.audio_hop_length);
    r.read("audio_gated_attn", c.audio_gated_attn);
    r.read("audio_cross_attn_mod", c.audio_cross_attn_mod);
}

void read_shared(const ConfigReader & r, TransformerConfig & c) {
    r.read("num_layers", c.num_layers);
    r.read("norm_eps", c.norm_eps);
    r.read("caption_channels", c.caption_channels);
    r.read("attention_bias", c.attention_bias);
    r.read("attention_out_bias", c.attention_out_bias);
    r.read("rope_theta", c.rope_theta);
    r.read("rope_double_precision", c.rope_double_precision);
    r.read("causal_offset", c.causal_offset);
    r.read("timestep_scale_multiplier", c.timestep_scale_multiplier);
    r.read("cross_attn_timestep_scale_multiplier", c.cross_attn_timestep_scale_multiplier);
    c.rope_type = r.rope_type("rope_type", RopeType::interleaved);
    r.read("use_prompt_embeddings", c.use_prompt_embeddings);
    r.read("perturbed_attn", c.perturbed_attn);
    r.read("ff_bias", c.ff_bias);
    r.read("audio_ff_bias", c.audio_ff_bias);
    r.read("use_prompt_adaln_single", c.use_prompt_adaln_single);
    r.read("use_keyframes_abs_pos_embedding", c.use_keyframes_abs_pos_embedding);
}

// Settings diffusers accepts but this implementation does not (each names its key).
void refuse_unimplemented(const ConfigReader & r) {
    std::string s = "gelu-approximate";
    r.read("activation_fn", s);
    if (s != "gelu-approximate") r.fail("activation_fn", "is '" + s + "'; only 'gelu-approximate' is implemented");
    s = "rms_norm_across_heads";
    r.read("qk_norm", s);
    if (s != "rms_norm_across_heads") r.fail("qk_norm", "is '" + s + "'; only 'rms_norm_across_heads' is implemented");
    bool affine = false;
    r.read("norm_elementwise_affine", affine);
    if (affine) r.fail("norm_elementwise_affine", "is true; only weightless block norms are implemented");
    int64_t audio_patch = 1;
    r.read("audio_patch_size", audio_patch);
    if (audio_patch != 1) r.fail("audio_patch_size", "is " + std::to_string(audio_patch) + "; only 1 is implemented");
}

void check_sizes(const ConfigReader & r, const TransformerConfig & c) {
    auto positive = [&](const char * key, int64_t v) {
        if (v <= 0) r.fail(key, "is " + std::to_string(v) + "; it must be positive");
    };
    positive("in_channels", c.in_channels);
    positive("out_channels", c.out_channels);
    positive("patch_size", c.patch_size);
    positive("patch_size_t", c.patch_size_t);
    positive("num_attention_heads", c.num_attention_heads);
    positive("attention_head_dim", c.attention_head_dim);
    positive("audio_in_channels", c.audio_in_channels);
    positive("audio_out_channels", c.audio_out_channels);
    positive("audio_patch_size_t", c.audio_patch_size_t);
    positive("audio_num_attention_heads", c.audio_num_attention_heads);
    positive("audio_attention_head_dim", c.audio_attention_head_dim);
    positive("audio_scale_factor", c.audio_scale_factor);
    positive("num_layers", c.num_layers);
    positive("caption_channels", c.caption_channels);
    positive("audio_sampling_rate", c.audio_sampling_rate);
    positive("audio_hop_length", c.audio_hop_length);
    // The cross-modal RoPE tables have audio_cross_attention_dim channels and rotate the a2v/v2a projections, which
    // have the audio inner width; the audio text cross-attention reads audio_cross_attention_dim-wide text.
    if (c.audio_cross_attention_dim != c.audio_inner_dim())
        r.fail("audio_cross_attention_dim", "is " + std::to_string(c.audio_cross_attention_dim) +
                                                "; it must equal audio_num_attention_heads * audio_attention_head_dim (" +
                                                std::to_string(c.audio_inner_dim()) + ")");
    // Caption projection and prompt modulation produce / modulate inner_dim-wide text.
    if ((c.use_prompt_embeddings || c.prompt_modulation()) && c.cross_attention_dim != c.inner_dim())
        r.fail("cross_attention_dim", "is " + std::to_string(c.cross_attention_dim) +
                                          "; with use_prompt_embeddings or cross_attn_mod it must equal "
                                          "num_attention_heads * attention_head_dim (" +
                                          std::to_string(c.inner_dim()) + ")");
    if (c.rope_type == RopeType::split) {
        if ((c.inner_dim() / 2) % c.num_attention_heads != 0 || c.inner_dim() % 2 != 0)
            r.fail("rope_type", "is 'split' but inner_dim/2 is not divisible by num_attention_heads");
        if (c.audio_inner_dim() % 2 != 0 || (c.audio_inner_dim() / 2) % c.audio_num_attention_heads != 0 ||
            (c.audio_cross_attention_dim / 2) % c.num_attention_heads != 0)
            r.fail("rope_type", "is 'split' but the audio / cross-modal widths do not split over the heads");
    }
}

}  // namespace

TransformerConfig TransformerConfig::from_json(const nlohmann::json & j, const std::filesystem::path & file) {
    const ConfigReader r(j, file);
    TransformerConfig c;
    read_video_stream(r, c);
    read_audio_stream(r, c);
    read_shared(r, c);
    refuse_unimplemented(r);
    check_sizes(r, c);
    return c;
}

TransformerConfig TransformerConfig::from_file(const std::filesystem::path & config_json) {
    return from_json(read_config_json(config_json), config_json);
}

}  // namespace ddo::ltx2
