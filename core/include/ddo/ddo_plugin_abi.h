/* ddo plugin ABI: versioning, status codes, host services, and the two exported entry points.
 *
 * Rules (docs/architecture.md, "Plugin ABI"):
 *  - Only sized scalars, pointers and POD structs cross this boundary. No exceptions cross it.
 *  - ddo_plugin_negotiate is side-effect free: no CUDA, no LibTorch calls, no threads, no I/O.
 *  - Every table starts with struct_size and abi_minor; members are only ever appended.
 *    A bump of DDO_ABI_VERSION_MAJOR is breaking and the host refuses other majors.
 *  - Ownership is written at each pointer parameter: borrowed / owned by caller / static storage.
 */
#ifndef DDO_PLUGIN_ABI_H
#define DDO_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDO_ABI_VERSION_MAJOR 1 /* bump = breaking; the host refuses any other major          */
#define DDO_ABI_VERSION_MINOR 1 /* bump = appended members; the host accepts older minors     */
/* 1.1: ddo_model_vtable.pipeline_classes */

#if defined(__GNUC__)
#define DDO_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DDO_PLUGIN_EXPORT
#endif

typedef enum ddo_status {
    DDO_STATUS_OK = 0,
    DDO_STATUS_INVALID_ARGUMENT = 1,
    DDO_STATUS_OUT_OF_MEMORY = 2, /* OOM is a return value, never an abort */
    DDO_STATUS_UNSUPPORTED = 3,
    DDO_STATUS_BUSY = 4,          /* refused: a lease or an upload is pending */
    DDO_STATUS_UNAVAILABLE = 5,   /* e.g. no CUDA driver; the reason goes through set_error */
    DDO_STATUS_INTERNAL = 6,      /* a plugin caught an exception at its boundary */
    DDO_STATUS_INTERRUPTED = 7,
} ddo_status;

typedef enum ddo_plugin_kind {
    DDO_PLUGIN_KIND_MODEL = 1,
    DDO_PLUGIN_KIND_ALLOCATOR = 2,
} ddo_plugin_kind;

typedef enum ddo_log_level {
    DDO_LOG_LEVEL_TRACE = 0,
    DDO_LOG_LEVEL_DEBUG = 1,
    DDO_LOG_LEVEL_INFO = 2,
    DDO_LOG_LEVEL_WARN = 3,
    DDO_LOG_LEVEL_ERROR = 4,
} ddo_log_level;

/* Filled by the plugin in ddo_plugin_negotiate. All strings have static storage in the plugin. */
typedef struct ddo_plugin_info {
    uint32_t struct_size;              /* in: sizeof(ddo_plugin_info) as the host sees it */
    uint32_t abi_major;                /* out */
    uint32_t abi_minor;                /* out */
    uint32_t kind;                     /* out: ddo_plugin_kind */
    const char * name;                 /* out: canonical name, e.g. "qwen_image_21" */
    const char * version;              /* out: plugin version, e.g. "0.1.0" */
    const char * const * aliases;      /* out: NULL-terminated list, may be NULL */
    const char * build_fingerprint;    /* out: "core=..;torch=..;cuda=..;cc=.." */
} ddo_plugin_info;

/* The body of every plugin's ddo_plugin_negotiate: checks info (non-NULL, struct_size at least this
 * header's) and fills it with this header's ABI version and the plugin's identity. The strings must have
 * static storage in the plugin; build_fingerprint is DDO_BUILD_FINGERPRINT from ddo/build_info.h. */
static inline ddo_status ddo_plugin_info_fill(ddo_plugin_info * info, ddo_plugin_kind kind, const char * name,
                                              const char * version, const char * const * aliases,
                                              const char * build_fingerprint) {
    if (info == NULL || info->struct_size < sizeof(ddo_plugin_info)) return DDO_STATUS_INVALID_ARGUMENT;
    info->abi_major = DDO_ABI_VERSION_MAJOR;
    info->abi_minor = DDO_ABI_VERSION_MINOR;
    info->kind = (uint32_t)kind;
    info->name = name;
    info->version = version;
    info->aliases = aliases;
    info->build_fingerprint = build_fingerprint;
    return DDO_STATUS_OK;
}

/* Host services, passed to ddo_plugin_get_vtable; borrowed, valid for the life of the process. */
typedef struct ddo_host_api {
    uint32_t struct_size;
    uint32_t abi_minor;
    void * host_ctx;
    /* msg: borrowed for the call; the host copies it. */
    void (*log)(void * host_ctx, int32_t level, const char * plugin, const char * msg);
    /* Records the detail of the last failure of this plugin; msg copied by the host. */
    void (*set_error)(void * host_ctx, int32_t status, const char * msg);
} ddo_host_api;

/* Entry point 1: side-effect free. Returns DDO_STATUS_OK and fills *info (borrowed). */
typedef ddo_status (*ddo_plugin_negotiate_fn)(uint32_t host_abi_major, uint32_t host_abi_minor,
                                              ddo_plugin_info * info);
/* Entry point 2: called only after negotiation and fingerprint checks passed. Returns the kind's
 * vtable (static storage in the plugin), or NULL after reporting the reason through host->set_error. */
typedef const void * (*ddo_plugin_get_vtable_fn)(const ddo_host_api * host /* borrowed, process lifetime */);

#define DDO_PLUGIN_NEGOTIATE_SYMBOL "ddo_plugin_negotiate"
#define DDO_PLUGIN_GET_VTABLE_SYMBOL "ddo_plugin_get_vtable"

#ifdef __cplusplus
}
#endif

#endif /* DDO_PLUGIN_ABI_H */
