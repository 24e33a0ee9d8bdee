/* ddo allocator plugin ABI: a pure C table (no LibTorch). See docs/architecture.md, "Allocators".
 *
 * A pool hands out buffers with stable addresses. A buffer can be marked leased (compute is reading
 * it) or pending (an upload into it is in flight); release and reclaim of such a buffer are refused
 * with DDO_STATUS_BUSY, and so is closing a pool that still has one. Reclaim drops a buffer's physical
 * backing but keeps its address; recreate backs the same address again (content undefined).
 */
#ifndef DDO_ALLOCATOR_PLUGIN_H
#define DDO_ALLOCATOR_PLUGIN_H

#include "ddo_plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddo_alloc_pool ddo_alloc_pool; /* opaque, owned by the plugin */

typedef struct ddo_kv {
    const char * key;   /* borrowed */
    const char * value; /* borrowed */
} ddo_kv;

typedef enum ddo_alloc_backend {
    DDO_ALLOC_BACKEND_AUTO = 0, /* CUDA when a device is usable, else host */
    DDO_ALLOC_BACKEND_HOST = 1, /* host memory stands in for the device (CPU transport, CI) */
    DDO_ALLOC_BACKEND_CUDA = 2,
} ddo_alloc_backend;

typedef struct ddo_alloc_config {
    uint32_t struct_size;
    uint32_t backend;          /* ddo_alloc_backend */
    int32_t device;            /* CUDA ordinal; ignored by the host backend */
    uint32_t reserved0;
    uint64_t physical_limit;   /* bytes of backing the pool may hold at once; 0 = no limit */
    uint64_t virtual_limit;    /* bytes of address space the pool may reserve; 0 = no limit */
    const ddo_kv * options;    /* borrowed for the call: plugin-specific options from the preset */
    size_t n_options;
} ddo_alloc_config;

typedef struct ddo_alloc_buffer {
    uint64_t id;      /* pool-unique, never reused */
    void * ptr;       /* stable for the buffer's life, also across reclaim/recreate */
    uint64_t bytes;   /* usable bytes, >= requested */
} ddo_alloc_buffer;

enum {
    DDO_ALLOC_FLAG_LEASED = 1u << 0,  /* compute reads the buffer */
    DDO_ALLOC_FLAG_PENDING = 1u << 1, /* an upload into the buffer is in flight */
};

typedef struct ddo_alloc_stats {
    uint32_t struct_size;
    uint32_t backend;            /* the backend actually in use */
    uint64_t physical_bytes;     /* backing currently held */
    uint64_t virtual_bytes;      /* address space currently reserved */
    uint64_t bytes_in_use;       /* sum of live buffer sizes */
    uint64_t peak_bytes_in_use;
    uint64_t live_buffers;
    uint64_t leased_buffers;
    uint64_t pending_buffers;
    uint64_t reserves;
    uint64_t releases;
    uint64_t reclaims;
    uint64_t recreates;
    uint64_t trims;
    uint64_t trimmed_bytes;
    uint64_t failures;           /* failed driver/OS calls */
    uint64_t refusals;           /* BUSY answers */
    uint64_t ooms;
    uint64_t quarantines;        /* buffers withheld after a failure that could not be proven safe */
} ddo_alloc_stats;

typedef struct ddo_allocator_vtable {
    uint32_t struct_size;
    uint32_t abi_minor;
    /* *out_pool owned by caller; destroy with pool_close. */
    ddo_status (*pool_create)(const ddo_alloc_config * config /* borrowed */, ddo_alloc_pool ** out_pool);
    /* BUSY while any buffer is leased or pending; on OK every buffer is freed and pool is gone. */
    ddo_status (*pool_close)(ddo_alloc_pool * pool);
    /* alignment: power of two, >= 256 is always honoured. *out filled on OK. */
    ddo_status (*reserve)(ddo_alloc_pool * pool, uint64_t bytes, uint64_t alignment, ddo_alloc_buffer * out);
    ddo_status (*release)(ddo_alloc_pool * pool, uint64_t id);
    /* Replace the buffer's flags (DDO_ALLOC_FLAG_*). */
    ddo_status (*set_flags)(ddo_alloc_pool * pool, uint64_t id, uint32_t flags);
    /* (optional, NULL = UNSUPPORTED) drop / restore physical backing at the same address. */
    ddo_status (*reclaim)(ddo_alloc_pool * pool, uint64_t id);
    ddo_status (*recreate)(ddo_alloc_pool * pool, uint64_t id);
    /* Return cached idle backing to the system; live buffers keep their payloads. */
    ddo_status (*trim_idle)(ddo_alloc_pool * pool, uint64_t * out_released_bytes /* may be NULL */);
    ddo_status (*get_stats)(ddo_alloc_pool * pool, ddo_alloc_stats * out /* out->struct_size set by caller */);
} ddo_allocator_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DDO_ALLOCATOR_PLUGIN_H */
