// The qwen_image_21 plugin's identity: the kit (ddo/model/plugin_entry.hpp) provides the C entry points and runs
// run_qwen_image_21 (plugin_run.cpp) with every exception caught at the ABI edge.
#include "ddo/model/plugin_entry.hpp"
#include "plugin_run.hpp"

namespace {

const char * const kAliases[] = {"qwen_image", nullptr};
const char * const kComponents[] = {"text_encoder", "vision_tower", "transformer", "vae", nullptr};
// Exact keys: anything else under plugin.qwen_image_21 is refused before the run (with the nearest key).
const char * const kOptions[] = {"plugin.qwen_image_21.use_kv_cache", "plugin.qwen_image_21.output_resolution",
                                  "plugin.qwen_image_21.kv_cache_placement", nullptr};
const char * const kPipelineClasses[] = {"QwenImage21Pipeline", nullptr};

constexpr ddo::model::PluginDefinition kPlugin{
    "qwen_image_21",
    "0.1.0",
    kAliases,
    "Qwen-Image 2.1 (Qwen3-VL text encoder and vision tower, single-stream DiT, RGBA VAE) from a prompt or prompt "
    "embeddings, with up to 10 reference images",
    kComponents,
    kOptions,
    ddo::qwen_image_21::run_qwen_image_21,
    kPipelineClasses,
};

}  // namespace

DDO_MODEL_PLUGIN(kPlugin)
