// The vmm allocator plugin's C entry points: negotiate, get_vtable and the allocator table. Every
// exported function catches everything: exceptions never cross the ABI (docs/architecture.md).
#include <atomic>
#include <new>
#include <string>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/build_info.h"
#include "vmm_pool.hpp"

namespace {

using ddo::vmm::VmmPool;

constexpr const char * kPluginName = "vmm";
constexpr const char * kPluginVersion = "0.1.0";

std::atomic<const ddo_host_api *> g_host{nullptr};

void report(ddo_status status, const std::string & reason) {
    const ddo_host_api * host = g_host.load();
    if (status != DDO_STATUS_OK && host != nullptr && host->set_error != nullptr) {
        host->set_error(host->host_ctx, status, reason.c_str());
    }
}

void log_info(const std::string & msg) {
    const ddo_host_api * host = g_host.load();
    if (host != nullptr && host->log != nullptr) {
        host->log(host->host_ctx, DDO_LOG_LEVEL_INFO, kPluginName, msg.c_str());
    }
}

VmmPool * as_pool(ddo_alloc_pool * pool) { return reinterpret_cast<VmmPool *>(pool); }

// Runs fn(reason) behind the ABI boundary and reports a failure's reason to the host.
template <typename Fn>
ddo_status guarded(Fn && fn) noexcept {
    std::string reason;
    ddo_status status = DDO_STATUS_INTERNAL;
    try {
        status = fn(&reason);
    } catch (const std::bad_alloc &) {
        status = DDO_STATUS_OUT_OF_MEMORY;
        reason = "vmm: out of host memory for bookkeeping";
    } catch (const std::exception & e) {
        status = DDO_STATUS_INTERNAL;
        reason = std::string("vmm: internal error: ") + e.what();
    } catch (...) {
        status = DDO_STATUS_INTERNAL;
        reason = "vmm: internal error (unknown exception)";
    }
    try {
        report(status, reason);
    } catch (...) {
    }
    return status;
}

ddo_status null_pool(std::string * reason) {
    *reason = "vmm: pool is NULL";
    return DDO_STATUS_INVALID_ARGUMENT;
}

ddo_status vmm_pool_create(const ddo_alloc_config * config, ddo_alloc_pool ** out_pool) {
    return guarded([&](std::string * reason) {
        if (config == nullptr || out_pool == nullptr) {
            *reason = "vmm: pool_create needs a config and an output pointer";
            return DDO_STATUS_INVALID_ARGUMENT;
        }
        *out_pool = nullptr;
        std::unique_ptr<VmmPool> pool;
        std::string note;
        const ddo_status s = VmmPool::create(*config, &pool, reason, &note);
        if (!note.empty()) {
            log_info(note);
        }
        if (s == DDO_STATUS_OK) {
            *out_pool = reinterpret_cast<ddo_alloc_pool *>(pool.release());
        }
        return s;
    });
}

ddo_status vmm_pool_close(ddo_alloc_pool * pool) {
    return guarded([&](std::string * reason) {
        if (pool == nullptr) {
            return null_pool(reason);
        }
        const ddo_status s = as_pool(pool)->close(reason);
        if (s != DDO_STATUS_BUSY) {
            delete as_pool(pool);  // the pool is gone on every answer but BUSY
        }
        return s;
    });
}

ddo_status vmm_reserve(ddo_alloc_pool * pool, uint64_t bytes, uint64_t alignment, ddo_alloc_buffer * out) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->reserve(bytes, alignment, out, r) : null_pool(r); });
}
ddo_status vmm_release(ddo_alloc_pool * pool, uint64_t id) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->release(id, r) : null_pool(r); });
}
ddo_status vmm_set_flags(ddo_alloc_pool * pool, uint64_t id, uint32_t flags) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->set_flags(id, flags, r) : null_pool(r); });
}
ddo_status vmm_reclaim(ddo_alloc_pool * pool, uint64_t id) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->reclaim(id, r) : null_pool(r); });
}
ddo_status vmm_recreate(ddo_alloc_pool * pool, uint64_t id) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->recreate(id, r) : null_pool(r); });
}
ddo_status vmm_trim_idle(ddo_alloc_pool * pool, uint64_t * out_released) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->trim_idle(out_released, r) : null_pool(r); });
}
ddo_status vmm_get_stats(ddo_alloc_pool * pool, ddo_alloc_stats * out) {
    return guarded([&](std::string * r) { return pool ? as_pool(pool)->get_stats(out, r) : null_pool(r); });
}

const ddo_allocator_vtable kVtable = {
    sizeof(ddo_allocator_vtable),
    DDO_ABI_VERSION_MINOR,
    vmm_pool_create,
    vmm_pool_close,
    vmm_reserve,
    vmm_release,
    vmm_set_flags,
    vmm_reclaim,
    vmm_recreate,
    vmm_trim_idle,
    vmm_get_stats,
};

}  // namespace

extern "C" {

DDO_PLUGIN_EXPORT ddo_status ddo_plugin_negotiate(uint32_t, uint32_t, ddo_plugin_info * info) {
    return ddo_plugin_info_fill(info, DDO_PLUGIN_KIND_ALLOCATOR, kPluginName, kPluginVersion, nullptr, DDO_BUILD_FINGERPRINT);
}

DDO_PLUGIN_EXPORT const void * ddo_plugin_get_vtable(const ddo_host_api * host) {
    g_host.store(host);
    return &kVtable;
}

}  // extern "C"
