// LTX-2 DiT configuration read from the transformer's config.json (models.md §5.2). The reference is diffusers'
// LTX2VideoTransformer3DModel.__init__ (models/transformers/transformer_ltx2.py): every field its math reads, with
// its defaults. LTX-2.0 and LTX-2.3 (gated attention, cross-attention modulation + prompt AdaLN, perturbed attention,
// no caption projection) both load; a setting this code does not implement is a UsageError naming file and key.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace ddo::ltx2 {

// How (cos, sin) tables pair the channels (models.md §5.3 step 4).
enum class RopeType { interleaved, split };

// Reads the keys of one config.json (borrowed `j`): a missing or null key keeps the diffusers default, a value of
// the wrong type or an unsupported value is a UsageError naming the file and the key.
class ConfigReader {
public:
    ConfigReader(const nlohmann::json & j, std::filesystem::path file) : j_(j), file_(std::move(file)) {}
    template <class T>
    void read(const char * key, T & out) const {
        const auto it = j_.find(key);
        if (it == j_.end() || it->is_null()) return;
        try {
            out = it->template get<T>();
        } catch (const nlohmann::json::exception & e) {
            fail(key, std::string("has the wrong type (") + e.what() + ")");
        }
    }
    // Present with the value null (diffusers' None).
    bool is_null(const char * key) const { return j_.contains(key) && j_.at(key).is_null(); }
    // "interleaved" / "split".
    RopeType rope_type(const char * key, RopeType fallback) const;
    [[noreturn]] void fail(const std::string & key, const std::string & what) const;
    const std::filesystem::path & file() const { return file_; }

private:
    const nlohmann::json & j_;
    std::filesystem::path file_;
};

// Parses a config.json file. Throws RuntimeError naming the file when it cannot be read or parsed.
nlohmann::json read_config_json(const std::filesystem::path & config_json);

struct TransformerConfig {
    // Video stream.
    int64_t in_channels = 128;
    int64_t out_channels = 128;
    int64_t patch_size = 1;
    int64_t patch_size_t = 1;
    int64_t num_attention_heads = 32;
    int64_t attention_head_dim = 128;
    int64_t cross_attention_dim = 4096;
    std::array<int64_t, 3> vae_scale_factors{8, 32, 32};
    int64_t pos_embed_max_pos = 20;
    int64_t base_height = 2048;
    int64_t base_width = 2048;
    bool gated_attn = false;
    bool cross_attn_mod = false;
    // Audio stream.
    int64_t audio_in_channels = 128;
    int64_t audio_out_channels = 128;
    int64_t audio_patch_size_t = 1;
    int64_t audio_num_attention_heads = 32;
    int64_t audio_attention_head_dim = 64;
    int64_t audio_cross_attention_dim = 2048;
    int64_t audio_scale_factor = 4;
    int64_t audio_pos_embed_max_pos = 20;
    int64_t audio_sampling_rate = 16000;
    int64_t audio_hop_length = 160;
    bool audio_gated_attn = false;
    bool audio_cross_attn_mod = false;
    // Shared.
    int64_t num_layers = 48;
    double norm_eps = 1e-6;
    int64_t caption_channels = 3840;
    bool attention_bias = true;
    bool attention_out_bias = true;
    double rope_theta = 10000.0;
    bool rope_double_precision = true;
    int64_t causal_offset = 1;
    double timestep_scale_multiplier = 1000.0;
    double cross_attn_timestep_scale_multiplier = 1000.0;
    RopeType rope_type = RopeType::interleaved;
    bool use_prompt_embeddings = true;   // 2.0: caption_projection / audio_caption_projection in the DiT
    bool perturbed_attn = false;         // 2.3+: LTX2PerturbedAttnProcessor (STG)
    bool ff_bias = true;
    bool audio_ff_bias = true;
    bool use_prompt_adaln_single = true;  // with cross_attn_mod: prompt_adaln / audio_prompt_adaln exist
    bool use_keyframes_abs_pos_embedding = false;

    int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
    int64_t audio_inner_dim() const { return audio_num_attention_heads * audio_attention_head_dim; }
    int64_t video_mod_params() const { return cross_attn_mod ? 9 : 6; }
    int64_t audio_mod_params() const { return audio_cross_attn_mod ? 9 : 6; }
    // Blocks carry prompt_scale_shift_table / audio_prompt_scale_shift_table.
    bool prompt_modulation() const { return cross_attn_mod || audio_cross_attn_mod; }
    // The DiT carries prompt_adaln / audio_prompt_adaln (timestep-dependent prompt K/V modulation; needs sigma).
    bool prompt_adaln() const { return prompt_modulation() && use_prompt_adaln_single; }

    // `file` names the source in messages. Throws UsageError naming file and key.
    static TransformerConfig from_json(const nlohmann::json & j, const std::filesystem::path & file);
    // <dir>/config.json. Throws RuntimeError when unreadable, UsageError for unsupported settings.
    static TransformerConfig from_file(const std::filesystem::path & config_json);
};

}  // namespace ddo::ltx2
