// VmmPool implementation (see vmm_pool.hpp and Note [VMM pool states]).
#include "vmm_pool.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "cuda_backend.hpp"
#include "fault_injection.hpp"
#include "host_backend.hpp"

namespace ddo::vmm {
namespace {

constexpr std::uint64_t kMinAlignment = 256;

std::string mib(std::uint64_t bytes) {
    const std::uint64_t whole = bytes >> 20;
    const std::uint64_t frac = ((bytes & ((1ull << 20) - 1)) * 100) >> 20;
    return std::to_string(whole) + "." + (frac < 10 ? "0" : "") + std::to_string(frac) + " MiB";
}

bool parse_u64(std::string_view text, std::uint64_t * out) {
    if (text.empty() || text.size() > 19) {
        return false;
    }
    std::uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') {
            return false;
        }
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    *out = v;
    return true;
}

struct PoolOptions {
    std::uint64_t granularity = 0;
    bool cache_released = true;
    std::vector<std::pair<Primitive, std::uint64_t>> faults;
};

ddo_status parse_options(const ddo_alloc_config & config, PoolOptions * out, std::string * reason) {
    for (size_t i = 0; i < config.n_options; ++i) {
        const ddo_kv & kv = config.options[i];
        if (kv.key == nullptr || kv.value == nullptr) {
            *reason = "vmm: pool option " + std::to_string(i) + " has a null key or value";
            return DDO_STATUS_INVALID_ARGUMENT;
        }
        const std::string_view key = kv.key;
        const std::string_view value = kv.value;
        if (key == "granularity") {
            if (!parse_u64(value, &out->granularity)) {
                *reason = "vmm: pool option granularity = '" + std::string(value) + "' is not a byte count";
                return DDO_STATUS_INVALID_ARGUMENT;
            }
        } else if (key == "cache_released") {
            if (value != "true" && value != "false") {
                *reason = "vmm: pool option cache_released = '" + std::string(value) + "' must be true or false";
                return DDO_STATUS_INVALID_ARGUMENT;
            }
            out->cache_released = value == "true";
        } else if (key.substr(0, 6) == "fault.") {
            const Primitive p = primitive_from_name(key.substr(6));
            std::uint64_t nth = 0;
            if (p == Primitive::count || !parse_u64(value, &nth)) {
                *reason = "vmm: pool option " + std::string(key) + " = '" + std::string(value) +
                          "' is invalid; use fault.<reserve_range|free_range|create_chunk|release_chunk|map|unmap> = <N>";
                return DDO_STATUS_INVALID_ARGUMENT;
            }
            out->faults.emplace_back(p, nth);
        } else {
            *reason = "vmm: unknown pool option '" + std::string(key) +
                      "' (known: granularity, cache_released, fault.<primitive>); remove it from the preset";
            return DDO_STATUS_INVALID_ARGUMENT;
        }
    }
    return DDO_STATUS_OK;
}

}  // namespace

ddo_status VmmPool::create(const ddo_alloc_config & config, std::unique_ptr<VmmPool> * out, std::string * reason,
                           std::string * auto_note) {
    if (config.struct_size < sizeof(ddo_alloc_config)) {
        *reason = "vmm: ddo_alloc_config.struct_size " + std::to_string(config.struct_size) + " is smaller than " +
                  std::to_string(sizeof(ddo_alloc_config)) + "; rebuild the caller against this ABI";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    if (config.n_options > 0 && config.options == nullptr) {
        *reason = "vmm: ddo_alloc_config.options is NULL with n_options > 0";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    PoolOptions options;
    if (ddo_status s = parse_options(config, &options, reason); s != DDO_STATUS_OK) {
        return s;
    }
    std::unique_ptr<VmmBackend> backend;
    switch (config.backend) {
    case DDO_ALLOC_BACKEND_CUDA:
        backend = create_cuda_backend(config.device, reason);
        if (!backend) {
            return DDO_STATUS_UNAVAILABLE;
        }
        break;
    case DDO_ALLOC_BACKEND_AUTO: {
        std::string why;
        backend = create_cuda_backend(config.device, &why);
        if (backend) {
            break;
        }
        *auto_note = "vmm: backend auto chose host: " + why;
        [[fallthrough]];
    }
    case DDO_ALLOC_BACKEND_HOST: {
        std::string why;
        backend = HostBackend::create(options.granularity, &why);
        if (!backend) {
            *reason = why;
            return DDO_STATUS_UNAVAILABLE;
        }
        break;
    }
    default:
        *reason = "vmm: unknown backend " + std::to_string(config.backend) + " (0 = auto, 1 = host, 2 = cuda)";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    if (!options.faults.empty()) {
        auto faulty = std::make_unique<FaultInjectingBackend>(std::move(backend));
        for (auto [p, nth] : options.faults) {
            faulty->fail_nth(p, nth);
        }
        backend = std::move(faulty);
    }
    out->reset(new VmmPool(std::move(backend), config, options.cache_released));
    return DDO_STATUS_OK;
}

VmmPool::VmmPool(std::unique_ptr<VmmBackend> backend, const ddo_alloc_config & config, bool cache_released)
    : backend_(std::move(backend)),
      physical_limit_(config.physical_limit),
      virtual_limit_(config.virtual_limit),
      cache_released_(cache_released) {
    stats_.struct_size = sizeof(ddo_alloc_stats);
    stats_.backend = backend_->kind();
}

VmmPool::~VmmPool() {
    std::string ignored;
    for (auto & [id, slot] : live_) {
        destroy_slot(slot, &ignored);
    }
    for (auto & slot : idle_) {
        destroy_slot(slot, &ignored);
    }
    retry_quarantine();
}

void VmmPool::count_failure(const BackendResult & r, std::string * reason) {
    ++stats_.failures;
    if (r.status == DDO_STATUS_OUT_OF_MEMORY) {
        ++stats_.ooms;
    }
    *reason = r.reason;
}

ddo_status VmmPool::refuse_busy(const Slot & s, const char * what, std::string * reason) {
    ++stats_.refusals;
    std::string state;
    if (s.flags & DDO_ALLOC_FLAG_LEASED) {
        state = "leased";
    }
    if (s.flags & DDO_ALLOC_FLAG_PENDING) {
        state += state.empty() ? "pending" : " and pending";
    }
    *reason = std::string("vmm: ") + what + " of buffer " + std::to_string(s.id) + " refused: it is " + state +
              "; clear its flags (set_flags 0) once compute and uploads that use it have completed";
    return DDO_STATUS_BUSY;
}

ddo_status VmmPool::no_such_buffer(std::uint64_t id, const char * what, std::string * reason) {
    *reason = std::string("vmm: ") + what + ": no live buffer with id " + std::to_string(id) + " in this pool";
    return DDO_STATUS_INVALID_ARGUMENT;
}

std::uint64_t VmmPool::trim_locked(std::uint64_t wanted, std::string * reason) {
    std::uint64_t released = 0;
    while (!idle_.empty() && released < wanted) {
        Slot slot = idle_.front();
        idle_.erase(idle_.begin());
        const std::uint64_t backed = slot.backed ? slot.bytes : 0;
        std::string why;
        if (destroy_slot(slot, &why) == DDO_STATUS_OK) {
            released += backed;
        } else if (reason != nullptr && reason->empty()) {
            *reason = why;
        }
    }
    if (released > 0) {
        ++stats_.trims;
        stats_.trimmed_bytes += released;
    }
    return released;
}

ddo_status VmmPool::admit_growth(std::uint64_t physical, std::uint64_t virtual_bytes, std::string * reason) {
    auto over = [&] {
        return (physical_limit_ != 0 && stats_.physical_bytes + physical > physical_limit_) ||
               (virtual_limit_ != 0 && stats_.virtual_bytes + virtual_bytes > virtual_limit_);
    };
    if (over() && !idle_.empty()) {
        trim_locked(UINT64_MAX, nullptr);  // the idle cache is the first thing growth gives up
    }
    if (virtual_limit_ != 0 && stats_.virtual_bytes + virtual_bytes > virtual_limit_) {
        ++stats_.ooms;
        *reason = "vmm: virtual_limit " + mib(virtual_limit_) + " reached: " + mib(stats_.virtual_bytes) +
                  " reserved, " + mib(virtual_bytes) + " more requested; release buffers or raise the allocator's virtual limit";
        return DDO_STATUS_OUT_OF_MEMORY;
    }
    if (physical_limit_ != 0 && stats_.physical_bytes + physical > physical_limit_) {
        ++stats_.ooms;
        *reason = "vmm: physical_limit " + mib(physical_limit_) + " reached: " + mib(stats_.physical_bytes) +
                  " backed, " + mib(physical) + " more requested; reclaim idle buffers or raise the allocator's physical limit";
        return DDO_STATUS_OUT_OF_MEMORY;
    }
    return DDO_STATUS_OK;
}

ddo_status VmmPool::back_slot(Slot & s, std::string * reason) {
    std::uint64_t handle = 0;
    BackendResult r = backend_->create_chunk(s.bytes, &handle);
    if (!r.ok()) {
        count_failure(r, reason);
        return r.status;
    }
    r = backend_->map(s.addr, s.bytes, handle);
    if (!r.ok()) {
        count_failure(r, reason);
        BackendResult undo = backend_->release_chunk(handle, s.bytes);
        if (!undo.ok()) {
            ++stats_.failures;
            ++stats_.quarantines;
            stats_.physical_bytes += s.bytes;  // still held until proven otherwise
            quarantine_.push_back({0, s.bytes, handle, false, true, false});
            *reason += "; then " + undo.reason + " (chunk quarantined)";
        }
        return r.status;
    }
    s.handle = handle;
    s.backed = true;
    stats_.physical_bytes += s.bytes;
    return DDO_STATUS_OK;
}

ddo_status VmmPool::unback_slot(Slot & s, std::string * reason) {
    if (!s.backed) {
        return DDO_STATUS_OK;
    }
    BackendResult r = backend_->unmap(s.addr, s.bytes);
    if (!r.ok()) {
        // Nothing changed: the buffer stays backed and mapped, the caller may retry.
        count_failure(r, reason);
        return r.status;
    }
    s.backed = false;
    r = backend_->release_chunk(s.handle, s.bytes);
    if (!r.ok()) {
        // Unmapped but the chunk was not released: withhold it, keep counting it as held.
        count_failure(r, reason);
        ++stats_.quarantines;
        quarantine_.push_back({0, s.bytes, s.handle, false, true, false});
        *reason += " (chunk quarantined; retried at close)";
        return r.status;
    }
    stats_.physical_bytes -= s.bytes;
    return DDO_STATUS_OK;
}

ddo_status VmmPool::destroy_slot(Slot & s, std::string * reason) {
    ddo_status status = DDO_STATUS_OK;
    if (s.backed) {
        status = unback_slot(s, reason);
        if (s.backed) {
            // unmap failed: the range and chunk cannot be proven free; withhold both.
            ++stats_.quarantines;
            quarantine_.push_back({s.addr, s.bytes, s.handle, true, true, true});
            *reason += " (buffer " + std::to_string(s.id) + " quarantined; retried at close)";
            return status;
        }
    }
    BackendResult r = backend_->free_range(s.addr, s.bytes);
    if (!r.ok()) {
        count_failure(r, reason);
        ++stats_.quarantines;
        quarantine_.push_back({s.addr, s.bytes, 0, false, false, true});
        *reason += " (address range quarantined; retried at close)";
        return r.status;
    }
    stats_.virtual_bytes -= s.bytes;
    return status;
}

void VmmPool::retry_quarantine() {
    std::vector<Quarantined> still;
    for (Quarantined q : quarantine_) {
        if (q.mapped && backend_->unmap(q.addr, q.bytes).ok()) {
            q.mapped = false;
        }
        if (!q.mapped && q.has_chunk && backend_->release_chunk(q.handle, q.bytes).ok()) {
            q.has_chunk = false;
            stats_.physical_bytes -= q.bytes;
        }
        if (!q.mapped && q.has_range && backend_->free_range(q.addr, q.bytes).ok()) {
            q.has_range = false;
            stats_.virtual_bytes -= q.bytes;
        }
        if (q.mapped || q.has_chunk || q.has_range) {
            still.push_back(q);
        }
    }
    quarantine_ = std::move(still);
}

ddo_status VmmPool::reserve(std::uint64_t bytes, std::uint64_t alignment, ddo_alloc_buffer * out, std::string * reason) {
    if (out == nullptr || bytes == 0 || (alignment & (alignment - 1)) != 0) {
        *reason = "vmm: reserve needs bytes > 0, a power-of-two alignment and an output buffer (got bytes " +
                  std::to_string(bytes) + ", alignment " + std::to_string(alignment) + ")";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    std::lock_guard lock(mutex_);
    const std::uint64_t g = backend_->granularity();
    if (bytes > UINT64_MAX - g) {
        *reason = "vmm: reserve of " + std::to_string(bytes) + " bytes overflows";
        return DDO_STATUS_OUT_OF_MEMORY;
    }
    const std::uint64_t rounded = (bytes + g - 1) / g * g;
    const std::uint64_t align = std::max({alignment, kMinAlignment, g});
    Slot slot;
    // Reuse an idle slot of the same size: its range and chunk come back without driver calls.
    auto it = std::find_if(idle_.begin(), idle_.end(), [&](const Slot & s) { return s.bytes == rounded && s.addr % align == 0; });
    if (it != idle_.end()) {
        slot = *it;
        idle_.erase(it);
        if (!slot.backed) {
            if (ddo_status s = admit_growth(rounded, 0, reason); s != DDO_STATUS_OK) {
                idle_.push_back(slot);
                return s;
            }
            if (ddo_status s = back_slot(slot, reason); s != DDO_STATUS_OK) {
                idle_.push_back(slot);
                return s;
            }
        }
    } else {
        if (ddo_status s = admit_growth(rounded, rounded, reason); s != DDO_STATUS_OK) {
            return s;
        }
        BackendResult r = backend_->reserve_range(rounded, align, &slot.addr);
        if (!r.ok()) {
            count_failure(r, reason);
            return r.status;
        }
        stats_.virtual_bytes += rounded;
        slot.bytes = rounded;
        if (ddo_status s = back_slot(slot, reason); s != DDO_STATUS_OK) {
            std::string ignored;
            destroy_slot(slot, &ignored);
            return s;
        }
    }
    slot.id = next_id_++;
    slot.flags = 0;
    live_.emplace(slot.id, slot);
    ++stats_.reserves;
    ++stats_.live_buffers;
    stats_.bytes_in_use += slot.bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    out->id = slot.id;
    out->ptr = reinterpret_cast<void *>(slot.addr);
    out->bytes = slot.bytes;
    return DDO_STATUS_OK;
}

ddo_status VmmPool::release(std::uint64_t id, std::string * reason) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) {
        return no_such_buffer(id, "release", reason);
    }
    Slot & slot = it->second;
    if (busy(slot)) {
        return refuse_busy(slot, "release", reason);
    }
    Slot gone = slot;
    live_.erase(it);
    ++stats_.releases;
    --stats_.live_buffers;
    stats_.bytes_in_use -= gone.bytes;
    if (cache_released_ && gone.backed) {
        idle_.push_back(gone);
        return DDO_STATUS_OK;
    }
    return destroy_slot(gone, reason);
}

ddo_status VmmPool::set_flags(std::uint64_t id, std::uint32_t flags, std::string * reason) {
    constexpr std::uint32_t known = DDO_ALLOC_FLAG_LEASED | DDO_ALLOC_FLAG_PENDING;
    if ((flags & ~known) != 0) {
        *reason = "vmm: set_flags: unknown flag bits 0x" + std::to_string(flags & ~known) + " (known: LEASED=1, PENDING=2)";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) {
        return no_such_buffer(id, "set_flags", reason);
    }
    Slot & slot = it->second;
    if (!slot.backed && flags != 0) {
        *reason = "vmm: set_flags: buffer " + std::to_string(id) + " is reclaimed (no backing); recreate it before leasing or uploading";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    auto bit = [](std::uint32_t f, std::uint32_t b) { return (f & b) ? 1 : 0; };
    stats_.leased_buffers += bit(flags, DDO_ALLOC_FLAG_LEASED) - bit(slot.flags, DDO_ALLOC_FLAG_LEASED);
    stats_.pending_buffers += bit(flags, DDO_ALLOC_FLAG_PENDING) - bit(slot.flags, DDO_ALLOC_FLAG_PENDING);
    slot.flags = flags;
    return DDO_STATUS_OK;
}

ddo_status VmmPool::reclaim(std::uint64_t id, std::string * reason) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) {
        return no_such_buffer(id, "reclaim", reason);
    }
    Slot & slot = it->second;
    if (busy(slot)) {
        return refuse_busy(slot, "reclaim", reason);
    }
    if (!slot.backed) {
        return DDO_STATUS_OK;  // already reclaimed
    }
    ddo_status s = unback_slot(slot, reason);
    if (!slot.backed) {
        ++stats_.reclaims;  // the address is no longer backed, even if the chunk went to quarantine
    }
    return s;
}

ddo_status VmmPool::recreate(std::uint64_t id, std::string * reason) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) {
        return no_such_buffer(id, "recreate", reason);
    }
    Slot & slot = it->second;
    if (slot.backed) {
        return DDO_STATUS_OK;  // nothing to do; the payload is untouched
    }
    if (ddo_status s = admit_growth(slot.bytes, 0, reason); s != DDO_STATUS_OK) {
        return s;
    }
    if (ddo_status s = back_slot(slot, reason); s != DDO_STATUS_OK) {
        return s;
    }
    ++stats_.recreates;
    return DDO_STATUS_OK;
}

ddo_status VmmPool::trim_idle(std::uint64_t * out_released, std::string * reason) {
    std::lock_guard lock(mutex_);
    std::string why;
    const std::uint64_t released = trim_locked(UINT64_MAX, &why);
    if (out_released != nullptr) {
        *out_released = released;
    }
    if (!why.empty()) {
        *reason = why;
        return DDO_STATUS_UNAVAILABLE;
    }
    return DDO_STATUS_OK;
}

ddo_status VmmPool::get_stats(ddo_alloc_stats * out, std::string * reason) {
    if (out == nullptr || out->struct_size < 2 * sizeof(std::uint32_t)) {
        *reason = "vmm: get_stats needs an output with struct_size set (sizeof(ddo_alloc_stats))";
        return DDO_STATUS_INVALID_ARGUMENT;
    }
    std::lock_guard lock(mutex_);
    const std::uint32_t caller_size = out->struct_size;
    ddo_alloc_stats copy = stats_;
    // A caller built against an older minor sees the prefix it knows (members are only appended).
    std::memcpy(out, &copy, std::min<std::size_t>(caller_size, sizeof(copy)));
    out->struct_size = std::min<std::uint32_t>(caller_size, sizeof(copy));
    return DDO_STATUS_OK;
}

ddo_status VmmPool::close(std::string * reason) {
    std::lock_guard lock(mutex_);
    for (auto & [id, slot] : live_) {
        if (busy(slot)) {
            return refuse_busy(slot, "pool close", reason);
        }
    }
    std::string first_failure;
    for (auto & [id, slot] : live_) {
        std::string why;
        if (destroy_slot(slot, &why) != DDO_STATUS_OK && first_failure.empty()) {
            first_failure = why;
        }
    }
    stats_.live_buffers = 0;
    stats_.bytes_in_use = 0;
    live_.clear();
    for (auto & slot : idle_) {
        std::string why;
        if (destroy_slot(slot, &why) != DDO_STATUS_OK && first_failure.empty()) {
            first_failure = why;
        }
    }
    idle_.clear();
    retry_quarantine();
    if (!quarantine_.empty()) {
        *reason = "vmm: pool closed with " + std::to_string(quarantine_.size()) +
                  " chunk(s) or range(s) that could not be returned (" + mib(stats_.physical_bytes) + " physical, " +
                  mib(stats_.virtual_bytes) + " virtual); first failure: " + first_failure;
        quarantine_.clear();  // the pool is gone; what the backend kept is reported, not retried
        return DDO_STATUS_UNAVAILABLE;
    }
    return DDO_STATUS_OK;
}

}  // namespace ddo::vmm
