/* ddo model plugin ABI. See docs/architecture.md, "Model plugins".
 *
 * Model plugins hold model math only. They are rebuilt with the host (the fingerprint must match
 * exactly), so inside `run` they may use the C++ core API (ddo/cpp/...) on the run context; across
 * this table only C types pass and no exception escapes.
 */
#ifndef DDO_MODEL_PLUGIN_H
#define DDO_MODEL_PLUGIN_H

#include "ddo_plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque to C; in C++ it is ddo::RunContext (core/include/ddo/run_context.hpp). */
typedef struct ddo_run_context ddo_run_context;

typedef struct ddo_model_vtable {
    uint32_t struct_size;
    uint32_t abi_minor;
    const char * description;                 /* static storage: one line for `ddo-host plugins` */
    const char * const * components;          /* static, NULL-terminated: e.g. "transformer", "vae" */
    /* static, NULL-terminated preset key patterns this plugin supports beyond the common schema
     * ("*" suffix allowed, e.g. "qwen_image_21.*"). A preset that sets any other plugin-specific
     * key is refused before anything runs. */
    const char * const * supported_options;
    /* Runs one job. ctx is borrowed for the call. Errors: status + host->set_error(message). */
    ddo_status (*run)(ddo_run_context * ctx);
    /* since ABI 1.1 (optional, may be NULL): static, NULL-terminated diffusers pipeline classes this plugin takes
     * (model_index.json "_class_name", e.g. "QwenImage21Pipeline"). The host refuses a checkpoint of another class
     * before the run (exit 2) and names the installed plugin that declares it. */
    const char * const * pipeline_classes;
} ddo_model_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DDO_MODEL_PLUGIN_H */
