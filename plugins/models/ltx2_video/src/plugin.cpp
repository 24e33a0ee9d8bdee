// The ltx2_video plugin's identity: the kit (ddo/model/plugin_entry.hpp) provides the C entry points and runs
// run_ltx2_video (plugin_run.cpp) with every exception caught at the ABI edge.
#include "ddo/model/plugin_entry.hpp"
#include "plugin_run.hpp"

namespace {

const char * const kAliases[] = {"ltx2", nullptr};
const char * const kComponents[] = {"text_encoder", "connectors", "transformer",      "vae",
                                     "audio_vae",    "vocoder",    "latent_upsampler", nullptr};
// Exact keys: anything else under plugin.ltx2_video is refused before the run (with the nearest key). The
// guidance keys are LTX2Pipeline's arguments of the same names (workload.guidance_scale is its guidance_scale).
const char * const kOptions[] = {"plugin.ltx2_video.stg_scale",
                                 "plugin.ltx2_video.modality_scale",
                                 "plugin.ltx2_video.guidance_rescale",
                                 "plugin.ltx2_video.audio_guidance_scale",
                                 "plugin.ltx2_video.audio_stg_scale",
                                 "plugin.ltx2_video.audio_modality_scale",
                                 "plugin.ltx2_video.audio_guidance_rescale",
                                 "plugin.ltx2_video.stg_blocks",
                                 "plugin.ltx2_video.use_cross_timestep",
                                 "plugin.ltx2_video.decode_timestep",
                                 "plugin.ltx2_video.decode_noise_scale",
                                 "plugin.ltx2_video.max_sequence_length",
                                 "plugin.ltx2_video.frames_png",
                                 "plugin.ltx2_video.image_crf",
                                 "plugin.ltx2_video.upsampler",
                                 "plugin.ltx2_video.stage2_sigmas",
                                 "plugin.ltx2_video.stage2_guidance_scale",
                                 nullptr};
const char * const kPipelineClasses[] = {"LTX2Pipeline", nullptr};

constexpr ddo::model::PluginDefinition kPlugin{
    "ltx2_video",
    ddo::ltx2::kLtx2VideoVersion,
    kAliases,
    "LTX-2 text -> video with stereo audio (Gemma-3, audio+video DiT, video VAE, audio VAE, vocoder) from a prompt or "
    "prompt embeddings",
    kComponents,
    kOptions,
    ddo::ltx2::run_ltx2_video,
    kPipelineClasses,
};

}  // namespace

DDO_MODEL_PLUGIN(kPlugin)
