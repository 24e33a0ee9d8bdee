// The ltx2_image plugin's identity: the kit (ddo/model/plugin_entry.hpp) provides the C entry points and runs
// run_ltx2_image (plugin_run.cpp) with every exception caught at the ABI edge.
#include "ddo/model/plugin_entry.hpp"
#include "plugin_run.hpp"

namespace {

const char * const kAliases[] = {nullptr};
const char * const kComponents[] = {"text_encoder", "connectors", "transformer", "vae", nullptr};
// Exact keys: anything else under plugin.ltx2_image is refused before the run (with the nearest key). They are the
// image pipeline's arguments of the same names (workload.guidance_scale is its guidance_scale).
const char * const kOptions[] = {"plugin.ltx2_image.guidance_rescale", "plugin.ltx2_image.pag_scale",
                                 "plugin.ltx2_image.pag_applied_layers", "plugin.ltx2_image.max_sequence_length",
                                 nullptr};
const char * const kPipelineClasses[] = {"LTX2ImagePipeline", nullptr};

constexpr ddo::model::PluginDefinition kPlugin{
    "ltx2_image",
    "0.1.0",
    kAliases,
    "LTX-2.3 image-only text -> image (Gemma-3, audio-less DiT, one frame, LTX-2.3 video VAE) from a prompt or "
    "prompt embeddings",
    kComponents,
    kOptions,
    ddo::ltx2::run_ltx2_image,
    kPipelineClasses,
};

}  // namespace

DDO_MODEL_PLUGIN(kPlugin)
