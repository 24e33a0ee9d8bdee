/* The linear allocator plugin (C ABI: core/include/ddo/ddo_allocator_plugin.h).
 * Each reserve is one allocation; release frees it unless the buffer is leased or pending (BUSY).
 * reclaim/recreate are not offered (NULL): linear has no address reservation to keep. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddo/build_info.h"
#include "ddo/ddo_allocator_plugin.h"

typedef int cu_result;
typedef unsigned long long cu_deviceptr;
typedef int cu_device;
typedef void * cu_context;

static const ddo_host_api * g_host = NULL;

static void report(ddo_status st, const char * msg) {
    if (g_host != NULL && g_host->set_error != NULL) g_host->set_error(g_host->host_ctx, (int32_t)st, msg);
}

/* ---- CUDA driver, resolved once ---- */
static struct {
    pthread_once_t once;
    int ok;
    char reason[256];
    cu_result (*init)(unsigned int);
    cu_result (*device_get)(cu_device *, int);
    cu_result (*primary_ctx_retain)(cu_context *, cu_device);
    cu_result (*ctx_set_current)(cu_context);
    cu_result (*mem_alloc)(cu_deviceptr *, size_t);
    cu_result (*mem_free)(cu_deviceptr);
} g_cu = {PTHREAD_ONCE_INIT, 0, "", NULL, NULL, NULL, NULL, NULL, NULL};

static void cu_load(void) {
    void * h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(g_cu.reason, sizeof g_cu.reason, "linear: no CUDA driver (dlopen libcuda.so.1: %s); use backend host", dlerror());
        return;
    }
    g_cu.init = (cu_result(*)(unsigned int))dlsym(h, "cuInit");
    g_cu.device_get = (cu_result(*)(cu_device *, int))dlsym(h, "cuDeviceGet");
    g_cu.primary_ctx_retain = (cu_result(*)(cu_context *, cu_device))dlsym(h, "cuDevicePrimaryCtxRetain");
    g_cu.ctx_set_current = (cu_result(*)(cu_context))dlsym(h, "cuCtxSetCurrent");
    g_cu.mem_alloc = (cu_result(*)(cu_deviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
    g_cu.mem_free = (cu_result(*)(cu_deviceptr))dlsym(h, "cuMemFree_v2");
    if (!g_cu.init || !g_cu.device_get || !g_cu.primary_ctx_retain || !g_cu.ctx_set_current || !g_cu.mem_alloc || !g_cu.mem_free) {
        snprintf(g_cu.reason, sizeof g_cu.reason, "linear: libcuda.so.1 lacks a driver entry point (cuMemAlloc_v2 ...); update the driver");
        return;
    }
    cu_result r = g_cu.init(0);
    if (r != 0) {
        snprintf(g_cu.reason, sizeof g_cu.reason, "linear: cuInit failed (CUresult %d): no usable CUDA device", r);
        return;
    }
    g_cu.ok = 1;
}

/* ---- pool ---- */
typedef struct linear_buf {
    uint64_t id;
    void * base;   /* what was allocated (host: malloc'd; cuda: device pointer) */
    void * ptr;    /* aligned */
    uint64_t bytes;
    uint32_t flags;
} linear_buf;

struct ddo_alloc_pool {
    pthread_mutex_t mu;
    uint32_t backend;
    int device;
    cu_context ctx;
    uint64_t physical_limit;
    linear_buf * bufs;
    size_t n, cap;
    uint64_t next_id;
    ddo_alloc_stats st;
};

static int find_buf(ddo_alloc_pool * p, uint64_t id) {
    for (size_t i = 0; i < p->n; ++i)
        if (p->bufs[i].id == id) return (int)i;
    return -1;
}

static ddo_status lin_pool_create(const ddo_alloc_config * config, ddo_alloc_pool ** out_pool) {
    if (config == NULL || out_pool == NULL || config->struct_size < sizeof(ddo_alloc_config)) return DDO_STATUS_INVALID_ARGUMENT;
    if (config->n_options > 0) { /* linear has no pool options: a preset [plugin.linear] table is a mistake */
        char m[256];
        snprintf(m, sizeof m, "linear: unknown pool option '%s' (the linear allocator has no options); remove it from the preset's [plugin.linear] table",
                 config->options != NULL && config->options[0].key != NULL ? config->options[0].key : "(null)");
        report(DDO_STATUS_INVALID_ARGUMENT, m);
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    uint32_t backend = config->backend;
    cu_context ctx = NULL;
    if (backend == DDO_ALLOC_BACKEND_AUTO || backend == DDO_ALLOC_BACKEND_CUDA) {
        pthread_once(&g_cu.once, cu_load);
        if (g_cu.ok) {
            cu_device dev = 0;
            if (g_cu.device_get(&dev, config->device) != 0 || g_cu.primary_ctx_retain(&ctx, dev) != 0) {
                if (backend == DDO_ALLOC_BACKEND_CUDA) {
                    char m[160];
                    snprintf(m, sizeof m, "linear: CUDA device %d is not usable (cuDeviceGet/cuDevicePrimaryCtxRetain failed)", (int)config->device);
                    report(DDO_STATUS_UNAVAILABLE, m);
                    return DDO_STATUS_UNAVAILABLE;
                }
                backend = DDO_ALLOC_BACKEND_HOST;
            } else {
                backend = DDO_ALLOC_BACKEND_CUDA;
            }
        } else if (backend == DDO_ALLOC_BACKEND_CUDA) {
            report(DDO_STATUS_UNAVAILABLE, g_cu.reason);
            return DDO_STATUS_UNAVAILABLE;
        } else {
            backend = DDO_ALLOC_BACKEND_HOST;
        }
    } else if (backend != DDO_ALLOC_BACKEND_HOST) {
        report(DDO_STATUS_INVALID_ARGUMENT, "linear: unknown backend");
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    ddo_alloc_pool * p = (ddo_alloc_pool *)calloc(1, sizeof(ddo_alloc_pool));
    if (p == NULL) return DDO_STATUS_OUT_OF_MEMORY;
    pthread_mutex_init(&p->mu, NULL);
    p->backend = backend;
    p->device = config->device;
    p->ctx = ctx;
    p->physical_limit = config->physical_limit;
    p->next_id = 1;
    p->st.struct_size = sizeof(ddo_alloc_stats);
    p->st.backend = backend;
    *out_pool = p;
    return DDO_STATUS_OK;
}

static void free_buf(ddo_alloc_pool * p, linear_buf * b) {
    if (p->backend == DDO_ALLOC_BACKEND_CUDA) {
        g_cu.ctx_set_current(p->ctx);
        if (g_cu.mem_free((cu_deviceptr)(uintptr_t)b->base) != 0) p->st.failures++;
    } else {
        free(b->base);
    }
}

static ddo_status lin_pool_close(ddo_alloc_pool * p) {
    if (p == NULL) return DDO_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n; ++i)
        if (p->bufs[i].flags & (DDO_ALLOC_FLAG_LEASED | DDO_ALLOC_FLAG_PENDING)) {
            p->st.refusals++;
            pthread_mutex_unlock(&p->mu);
            report(DDO_STATUS_BUSY, "linear: pool_close refused: a buffer is leased or an upload into it is pending");
            return DDO_STATUS_BUSY;
        }
    for (size_t i = 0; i < p->n; ++i) free_buf(p, &p->bufs[i]);
    free(p->bufs);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return DDO_STATUS_OK;
}

static ddo_status lin_reserve(ddo_alloc_pool * p, uint64_t bytes, uint64_t alignment, ddo_alloc_buffer * out) {
    if (p == NULL || out == NULL || bytes == 0) return DDO_STATUS_INVALID_ARGUMENT;
    if (alignment < 256) alignment = 256;
    if ((alignment & (alignment - 1)) != 0) return DDO_STATUS_INVALID_ARGUMENT;
    const uint64_t rounded = (bytes + 255) & ~(uint64_t)255;
    pthread_mutex_lock(&p->mu);
    if (p->physical_limit != 0 && p->st.physical_bytes + rounded > p->physical_limit) {
        p->st.ooms++;
        pthread_mutex_unlock(&p->mu);
        report(DDO_STATUS_OUT_OF_MEMORY, "linear: physical_limit reached");
        return DDO_STATUS_OUT_OF_MEMORY;
    }
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 16;
        linear_buf * nb = (linear_buf *)realloc(p->bufs, nc * sizeof(linear_buf));
        if (nb == NULL) { pthread_mutex_unlock(&p->mu); return DDO_STATUS_OUT_OF_MEMORY; }
        p->bufs = nb;
        p->cap = nc;
    }
    linear_buf b;
    memset(&b, 0, sizeof b);
    if (p->backend == DDO_ALLOC_BACKEND_CUDA) {
        cu_deviceptr d = 0;
        g_cu.ctx_set_current(p->ctx);
        cu_result r = g_cu.mem_alloc(&d, (size_t)(rounded + (alignment > 256 ? alignment : 0)));
        if (r != 0) {
            if (r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */) p->st.ooms++; else p->st.failures++;
            pthread_mutex_unlock(&p->mu);
            report(r == 2 ? DDO_STATUS_OUT_OF_MEMORY : DDO_STATUS_INTERNAL, "linear: cuMemAlloc failed");
            return r == 2 ? DDO_STATUS_OUT_OF_MEMORY : DDO_STATUS_INTERNAL;
        }
        b.base = (void *)(uintptr_t)d;
        b.ptr = (void *)(uintptr_t)((d + alignment - 1) & ~(alignment - 1));
    } else {
        void * m = NULL;
        if (posix_memalign(&m, (size_t)alignment, (size_t)rounded) != 0) {
            p->st.ooms++;
            pthread_mutex_unlock(&p->mu);
            return DDO_STATUS_OUT_OF_MEMORY;
        }
        b.base = m;
        b.ptr = m;
    }
    b.id = p->next_id++;
    b.bytes = rounded;
    p->bufs[p->n++] = b;
    p->st.physical_bytes += rounded;
    p->st.virtual_bytes += rounded;
    p->st.bytes_in_use += rounded;
    if (p->st.bytes_in_use > p->st.peak_bytes_in_use) p->st.peak_bytes_in_use = p->st.bytes_in_use;
    p->st.live_buffers++;
    p->st.reserves++;
    out->id = b.id;
    out->ptr = b.ptr;
    out->bytes = b.bytes;
    pthread_mutex_unlock(&p->mu);
    return DDO_STATUS_OK;
}

static void count_flags(ddo_alloc_pool * p) {
    p->st.leased_buffers = 0;
    p->st.pending_buffers = 0;
    for (size_t i = 0; i < p->n; ++i) {
        if (p->bufs[i].flags & DDO_ALLOC_FLAG_LEASED) p->st.leased_buffers++;
        if (p->bufs[i].flags & DDO_ALLOC_FLAG_PENDING) p->st.pending_buffers++;
    }
}

static ddo_status lin_release(ddo_alloc_pool * p, uint64_t id) {
    if (p == NULL) return DDO_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    int i = find_buf(p, id);
    if (i < 0) { pthread_mutex_unlock(&p->mu); return DDO_STATUS_INVALID_ARGUMENT; }
    if (p->bufs[i].flags & (DDO_ALLOC_FLAG_LEASED | DDO_ALLOC_FLAG_PENDING)) {
        p->st.refusals++;
        pthread_mutex_unlock(&p->mu);
        return DDO_STATUS_BUSY;
    }
    free_buf(p, &p->bufs[i]);
    p->st.physical_bytes -= p->bufs[i].bytes;
    p->st.virtual_bytes -= p->bufs[i].bytes;
    p->st.bytes_in_use -= p->bufs[i].bytes;
    p->st.live_buffers--;
    p->st.releases++;
    p->bufs[i] = p->bufs[--p->n];
    pthread_mutex_unlock(&p->mu);
    return DDO_STATUS_OK;
}

static ddo_status lin_set_flags(ddo_alloc_pool * p, uint64_t id, uint32_t flags) {
    if (p == NULL || (flags & ~(uint32_t)(DDO_ALLOC_FLAG_LEASED | DDO_ALLOC_FLAG_PENDING)) != 0) return DDO_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    int i = find_buf(p, id);
    if (i >= 0) p->bufs[i].flags = flags;
    pthread_mutex_unlock(&p->mu);
    return i >= 0 ? DDO_STATUS_OK : DDO_STATUS_INVALID_ARGUMENT;
}

static ddo_status lin_trim_idle(ddo_alloc_pool * p, uint64_t * out_released_bytes) {
    if (p == NULL) return DDO_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    p->st.trims++;  /* linear caches nothing: nothing idle to return */
    pthread_mutex_unlock(&p->mu);
    if (out_released_bytes) *out_released_bytes = 0;
    return DDO_STATUS_OK;
}

static ddo_status lin_get_stats(ddo_alloc_pool * p, ddo_alloc_stats * out) {
    if (p == NULL || out == NULL || out->struct_size < sizeof(ddo_alloc_stats)) return DDO_STATUS_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    count_flags(p);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
    return DDO_STATUS_OK;
}

static const ddo_allocator_vtable k_vtable = {
    sizeof(ddo_allocator_vtable), DDO_ABI_VERSION_MINOR,
    lin_pool_create, lin_pool_close, lin_reserve, lin_release, lin_set_flags,
    NULL, NULL, /* reclaim, recreate: unsupported */
    lin_trim_idle, lin_get_stats,
};

DDO_PLUGIN_EXPORT ddo_status ddo_plugin_negotiate(uint32_t host_abi_major, uint32_t host_abi_minor, ddo_plugin_info * info) {
    (void)host_abi_major;
    (void)host_abi_minor;
    return ddo_plugin_info_fill(info, DDO_PLUGIN_KIND_ALLOCATOR, "linear", "0.1.0", NULL, DDO_BUILD_FINGERPRINT);
}

DDO_PLUGIN_EXPORT const void * ddo_plugin_get_vtable(const ddo_host_api * host) {
    g_host = host;
    return &k_vtable;
}
