// The C entry points of a model plugin, written once: a plugin describes itself in a PluginDefinition and says
// DDO_MODEL_PLUGIN(definition) in one source file. The kit then provides ddo_plugin_negotiate (side-effect free,
// static strings, the plugin's own compile-time fingerprint) and ddo_plugin_get_vtable, and runs the plugin's
// function on a ModelRun with every exception caught at the ABI edge and mapped to a status + host->set_error
// message (ddo::Error by exit code, c10::Error, std::bad_alloc, anything else).
//
//   const char * const kAliases[] = {"tiny", nullptr};
//   const char * const kComponents[] = {"transformer", nullptr};
//   const char * const kOptions[] = {"plugin.tiny_model.*", nullptr};
//   void run_tiny(ddo::model::ModelRun & run);
//   const char * const kClasses[] = {"TinyPipeline", nullptr};
//   constexpr ddo::model::PluginDefinition kPlugin{"tiny_model", "0.1.0", kAliases, "one-block example",
//                                                  kComponents, kOptions, run_tiny, kClasses};
//   DDO_MODEL_PLUGIN(kPlugin)
#pragma once

#include "ddo/build_info.h"
#include "ddo/ddo_model_plugin.h"
#include "ddo/model/model_run.hpp"

namespace ddo::model {

struct PluginDefinition {
    const char * name;                      // static storage, [a-z0-9_]
    const char * version;
    const char * const * aliases;           // NULL-terminated, may be null
    const char * description;               // one line for `ddo-host plugins`
    const char * const * components;        // NULL-terminated: "transformer", "vae", ...
    const char * const * supported_options; // NULL-terminated key patterns ("plugin.<name>.*")
    void (*run)(ModelRun & run);            // the model: throws ddo::Error (or anything) on failure
    const char * const * pipeline_classes = nullptr;  // NULL-terminated model_index.json classes it takes (ABI 1.1)
};

// The body of the vtable's run: a ModelRun over ctx, the plugin's function, every exception mapped to a status.
ddo_status run_guarded(const PluginDefinition & plugin, const ddo_host_api * host /* borrowed, may be null */,
                       ddo_run_context * ctx /* borrowed for the call */) noexcept;

}  // namespace ddo::model

#define DDO_MODEL_PLUGIN(definition)                                                                               \
    namespace {                                                                                                    \
    const ddo_host_api * ddo_model_plugin_host_ = nullptr;                                                        \
    ddo_status ddo_model_plugin_run_(ddo_run_context * ctx) {                                                     \
        return ::ddo::model::run_guarded(definition, ddo_model_plugin_host_, ctx);                                \
    }                                                                                                              \
    const ddo_model_vtable ddo_model_plugin_vtable_{sizeof(ddo_model_vtable), DDO_ABI_VERSION_MINOR,              \
                                                    (definition).description, (definition).components,            \
                                                    (definition).supported_options, ddo_model_plugin_run_,         \
                                                    (definition).pipeline_classes};                                \
    }                                                                                                              \
    extern "C" DDO_PLUGIN_EXPORT ddo_status ddo_plugin_negotiate(uint32_t, uint32_t, ddo_plugin_info * info) {     \
        return ddo_plugin_info_fill(info, DDO_PLUGIN_KIND_MODEL, (definition).name, (definition).version,          \
                                    (definition).aliases, DDO_BUILD_FINGERPRINT);                                  \
    }                                                                                                              \
    extern "C" DDO_PLUGIN_EXPORT const void * ddo_plugin_get_vtable(const ddo_host_api * host) {                   \
        ddo_model_plugin_host_ = host;                                                                             \
        return &ddo_model_plugin_vtable_;                                                                          \
    }
