#include "original_names.hpp"

namespace ddo::ltx2 {

std::vector<std::pair<std::string, std::string>> original_name_renames() {
    // Applied in order, each to every occurrence: the av_ca_* and prompt modulations before the plain
    // adaln_single they contain (diffusers renames adaln_single. / audio_adaln_single. only at the start of a key).
    std::vector<std::pair<std::string, std::string>> renames = {
        {"audio_patchify_proj", "audio_proj_in"},
        {"patchify_proj", "proj_in"},
        {"av_ca_video_scale_shift_adaln_single", "av_cross_attn_video_scale_shift"},
        {"av_ca_a2v_gate_adaln_single", "av_cross_attn_video_a2v_gate"},
        {"av_ca_audio_scale_shift_adaln_single", "av_cross_attn_audio_scale_shift"},
        {"av_ca_v2a_gate_adaln_single", "av_cross_attn_audio_v2a_gate"},
        {"scale_shift_table_a2v_ca_video", "video_a2v_cross_attn_scale_shift_table"},
        {"scale_shift_table_a2v_ca_audio", "audio_a2v_cross_attn_scale_shift_table"},
        {"audio_prompt_adaln_single.", "audio_prompt_adaln."},
        {"prompt_adaln_single.", "prompt_adaln."},
        {"q_norm", "norm_q"},
        {"k_norm", "norm_k"},
    };
    // Only at the start of a name, as diffusers does (a substring rule would also rewrite the names above).
    renames.emplace_back("\x01" "audio_adaln_single.", "audio_time_embed.");
    renames.emplace_back("\x01" "adaln_single.", "time_embed.");
    return renames;
}

store::ComponentSource with_original_names(store::ComponentSource source, const std::string & component) {
    if (component != "transformer" || !source.replaced()) return source;
    source.renames = original_name_renames();
    // The text connectors' weights sit in the original DiT; here they are the connectors component's.
    source.dropped = {"video_embeddings_connector.", "audio_embeddings_connector."};
    return source;
}

}  // namespace ddo::ltx2
