// Host staging routes (see ddo/platform/host_staging.hpp and Note [Host staging routes]).
#include "ddo/platform/host_staging.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "ddo/platform/linux_admission.hpp"
#include "ddo/util/format_bytes.hpp"

#if DDO_HAVE_CUDA_HEADERS
#include "ddo/platform/cuda_driver.hpp"
#endif

namespace ddo::platform {

namespace {

std::uint64_t page_size() { return static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)); }

// Page-aligned span covering [ptr, ptr + bytes).
std::pair<std::uintptr_t, std::uint64_t> page_span(const void * ptr, std::uint64_t bytes) {
    const std::uint64_t page = page_size();
    const auto start = reinterpret_cast<std::uintptr_t>(ptr) & ~static_cast<std::uintptr_t>(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(ptr) + bytes + page - 1) & ~static_cast<std::uintptr_t>(page - 1);
    return {start, end - start};
}

}  // namespace

namespace detail {

struct StagingState {
    std::mutex mutex;
    StagingBackend backend = StagingBackend::host;
    StagingLimits limits;
    const LinuxAdmission * admission = nullptr;
    RouteCounters pinned;
    RouteCounters registration;
    std::uint64_t locked_bytes = 0;  // host backend: both routes share RLIMIT_MEMLOCK
    std::vector<std::pair<std::uintptr_t, std::uint64_t>> registered;  // page spans
#if DDO_HAVE_CUDA_HEADERS
    const CudaDriver * driver = nullptr;
    CUdevice device = 0;
    CUcontext context = nullptr;
#endif

    ~StagingState() {
#if DDO_HAVE_CUDA_HEADERS
        if (driver != nullptr) {
            driver->api().primary_ctx_release(device);
        }
#endif
    }

    static void note(RouteCounters & c, const std::string & reason) {
        if (c.reasons.size() < 8 && std::find(c.reasons.begin(), c.reasons.end(), reason) == c.reasons.end()) {
            c.reasons.push_back(reason);
        }
    }
    std::string refuse(RouteCounters & c, const std::string & reason) {
        ++c.refusals;
        note(c, reason);
        return reason;
    }
    std::string fail(RouteCounters & c, const std::string & reason) {
        ++c.failures;
        note(c, reason);
        return reason;
    }
    static void succeed(RouteCounters & c, std::uint64_t bytes) {
        ++c.successes;
        c.bytes_current += bytes;
        c.bytes_total += bytes;
        c.bytes_peak = std::max(c.bytes_peak, c.bytes_current);
    }
    // Host backend: RLIMIT_MEMLOCK covers both routes (the kernel counts VmLck per process).
    std::string memlock_refusal(std::uint64_t bytes, GrowthRoute route) const {
        rlimit rl{};
        if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
            return std::string("RLIMIT_MEMLOCK is unknown (getrlimit: ") + std::strerror(errno) + "); growth refused";
        }
        if (rl.rlim_cur != RLIM_INFINITY && locked_bytes + bytes > rl.rlim_cur) {
            return "RLIMIT_MEMLOCK " + format_mib(rl.rlim_cur) + " with " + format_mib(locked_bytes) +
                   " already locked by staging (pinned allocations and registrations share it on the host backend) "
                   "leaves less than " + format_mib(bytes) + "; raise it (ulimit -l, memlock in /etc/security/limits.conf) or " +
                   lower_locked_hint(route);
        }
        return {};
    }
#if DDO_HAVE_CUDA_HEADERS
    std::string make_current() const {
        CUresult rc = driver->api().ctx_set_current(context);
        return rc == CUDA_SUCCESS ? std::string() : "cuCtxSetCurrent: " + driver->describe(rc);
    }
#endif

    void free_pinned(void * ptr, std::uint64_t bytes) noexcept {
        std::lock_guard lock(mutex);
        if (backend == StagingBackend::host) {
            ::munlock(ptr, bytes);
            ::munmap(ptr, bytes);
            locked_bytes -= bytes;
        } else {
#if DDO_HAVE_CUDA_HEADERS
            make_current();
            driver->api().mem_free_host(ptr);
#endif
        }
        pinned.bytes_current -= bytes;
    }

    void unregister(void * ptr, std::uint64_t bytes) noexcept {
        std::lock_guard lock(mutex);
        const auto span = page_span(ptr, bytes);
        if (backend == StagingBackend::host) {
            ::munlock(reinterpret_cast<void *>(span.first), span.second);
            locked_bytes -= span.second;
        } else {
#if DDO_HAVE_CUDA_HEADERS
            make_current();
            driver->api().mem_host_unregister(ptr);
#endif
        }
        registered.erase(std::remove(registered.begin(), registered.end(), span), registered.end());
        registration.bytes_current -= bytes;
    }
};

}  // namespace detail

const char * to_string(StagingBackend backend) { return backend == StagingBackend::cuda ? "cuda" : "host"; }

const char * to_string(RegistrationMode mode) {
    switch (mode) {
    case RegistrationMode::full: return "full";
    case RegistrationMode::bounded: return "bounded";
    case RegistrationMode::off: return "off";
    }
    return "off";
}

std::optional<RegistrationMode> parse_registration_mode(std::string_view text) {
    if (text == "full") return RegistrationMode::full;
    if (text == "bounded") return RegistrationMode::bounded;
    if (text == "off") return RegistrationMode::off;
    return std::nullopt;
}

nlohmann::json RouteCounters::to_json() const {
    return {{"attempts", attempts},       {"successes", successes},     {"failures", failures},
            {"refusals", refusals},       {"bytes_current", bytes_current}, {"bytes_peak", bytes_peak},
            {"bytes_total", bytes_total}, {"reasons", reasons}};
}

// --- RAII handles -------------------------------------------------------------------------------

namespace detail {
void release_range(StagingState & state, StagingRoute route, void * ptr, std::uint64_t bytes) noexcept {
    if (route == StagingRoute::pinned) state.free_pinned(ptr, bytes);
    else state.unregister(ptr, bytes);
}
}  // namespace detail

// --- HostStaging ----------------------------------------------------------------------------------

HostStaging::HostStaging(std::shared_ptr<detail::StagingState> state) : state_(std::move(state)) {}
HostStaging::~HostStaging() = default;  // live buffers keep the state alive and free themselves

std::unique_ptr<HostStaging> HostStaging::create(StagingBackend backend, StagingLimits limits,
                                                 const LinuxAdmission * admission, std::string * reason) {
    if (limits.registration == RegistrationMode::bounded && limits.registration_ceiling == 0) {
        *reason = "host staging: registration = bounded needs a registration ceiling > 0 (capacities.host_registration_ceiling)";
        return nullptr;
    }
    auto state = std::make_shared<detail::StagingState>();
    state->backend = backend;
    state->limits = limits;
    state->admission = admission;
    if (backend == StagingBackend::cuda) {
#if DDO_HAVE_CUDA_HEADERS
        state->driver = CudaDriver::get(reason);
        if (state->driver == nullptr) {
            return nullptr;
        }
        if (!state->driver->make_current(0, &state->device, &state->context, reason)) {
            state->driver = nullptr;
            return nullptr;
        }
#else
        *reason = "host staging: this build of libddo_core has no CUDA staging (built without CUDA headers)";
        return nullptr;
#endif
    }
    return std::unique_ptr<HostStaging>(new HostStaging(std::move(state)));
}

StagingResult<PinnedBuffer> HostStaging::allocate_pinned(std::uint64_t bytes) {
    StagingResult<PinnedBuffer> out;
    auto & s = *state_;
    std::lock_guard lock(s.mutex);
    auto & c = s.pinned;
    ++c.attempts;
    if (!s.limits.pinned_route) {
        out.reason = s.refuse(c, "the pinned route is off (" +
                                     (s.limits.pinned_route_reason.empty() ? std::string("StagingLimits::pinned_route = false")
                                                                           : s.limits.pinned_route_reason) +
                                     "): nothing is pinned; use pageable memory, or turn the pinned route on");
        return out;
    }
    if (bytes == 0) {
        out.reason = s.refuse(c, "pinned allocation of 0 bytes");
        return out;
    }
    if (s.limits.pinned_limit != 0 && c.bytes_current + bytes > s.limits.pinned_limit) {
        out.reason = s.refuse(c, "pinned_limit " + format_mib(s.limits.pinned_limit) + " with " + format_mib(c.bytes_current) +
                                     " pinned leaves less than " + format_mib(bytes) +
                                     "; raise the pinned-host budget (capacities.pinned_host_budget_gb)");
        return out;
    }
    const std::uint64_t page = page_size();
    const std::uint64_t rounded = (bytes + page - 1) / page * page;
    if (s.admission != nullptr) {
        const GrowthKind kind = s.backend == StagingBackend::host ? GrowthKind::locked : GrowthKind::commit;
        const auto decision = s.admission->admit(GrowthRequest{rounded, kind, s.limits.ram_headroom, "pinned allocation", GrowthRoute::pinned});
        if (!decision.admitted) {
            out.reason = s.refuse(c, decision.reason);
            return out;
        }
    }
    void * ptr = nullptr;
    if (s.backend == StagingBackend::host) {
        if (std::string why = s.memlock_refusal(rounded, GrowthRoute::pinned); !why.empty()) {
            out.reason = s.refuse(c, why);
            return out;
        }
        ptr = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (ptr == MAP_FAILED) {
            out.reason = s.fail(c, "mmap of " + format_mib(rounded) + " for a pinned allocation failed: " + std::strerror(errno));
            return out;
        }
        if (::mlock(ptr, rounded) != 0) {
            const int err = errno;
            ::munmap(ptr, rounded);
            out.reason = s.fail(c, "mlock of a " + format_mib(rounded) + " pinned allocation failed: " + std::strerror(err) +
                                       (err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK; raise it with ulimit -l, or " +
                                                                          lower_locked_hint(GrowthRoute::pinned) + ")"
                                                                    : std::string()));
            return out;
        }
        s.locked_bytes += rounded;
    } else {
#if DDO_HAVE_CUDA_HEADERS
        if (std::string why = s.make_current(); !why.empty()) {
            out.reason = s.fail(c, why);
            return out;
        }
        CUresult rc = s.driver->api().mem_host_alloc(&ptr, rounded, CU_MEMHOSTALLOC_PORTABLE);
        if (rc != CUDA_SUCCESS) {
            out.reason = s.fail(c, "cuMemHostAlloc(" + format_mib(rounded) + ") returned " + s.driver->describe(rc));
            return out;
        }
#endif
    }
    detail::StagingState::succeed(c, rounded);
    out.value.state_ = state_;
    out.value.ptr_ = ptr;
    out.value.bytes_ = rounded;
    return out;
}

StagingResult<HostRegistration> HostStaging::register_range(void * ptr, std::uint64_t bytes) {
    StagingResult<HostRegistration> out;
    auto & s = *state_;
    std::lock_guard lock(s.mutex);
    auto & c = s.registration;
    ++c.attempts;
    if (ptr == nullptr || bytes == 0) {
        out.reason = s.refuse(c, "registration of an empty range");
        return out;
    }
    if (s.limits.registration == RegistrationMode::off) {
        out.reason = s.refuse(c, "registration = off: existing memory is not registered (the pinned route is separate "
                                 "and was not tried); set registration = full or bounded to allow it");
        return out;
    }
    if (s.limits.registration == RegistrationMode::bounded && c.bytes_current + bytes > s.limits.registration_ceiling) {
        out.reason = s.refuse(c, "registration = bounded: ceiling " + format_mib(s.limits.registration_ceiling) + " with " +
                                     format_mib(c.bytes_current) + " registered leaves less than " + format_mib(bytes) +
                                     "; raise the host registration ceiling or register less");
        return out;
    }
    const auto span = page_span(ptr, bytes);
    for (const auto & [start, len] : s.registered) {
        if (span.first < start + len && start < span.first + span.second) {
            out.reason = s.refuse(c, "the range overlaps a page of an existing registration; register each range once");
            return out;
        }
    }
    if (s.backend == StagingBackend::host) {
        if (std::string why = s.memlock_refusal(span.second, GrowthRoute::registration); !why.empty()) {
            out.reason = s.refuse(c, why);
            return out;
        }
        if (::mlock(reinterpret_cast<void *>(span.first), span.second) != 0) {
            const int err = errno;
            out.reason = s.fail(c, "mlock of a " + format_mib(span.second) + " existing range failed: " + std::strerror(err) +
                                       (err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK or unmapped pages; raise it with ulimit -l, or " +
                                                                          lower_locked_hint(GrowthRoute::registration) + ")"
                                                                    : std::string()));
            return out;
        }
        s.locked_bytes += span.second;
    } else {
#if DDO_HAVE_CUDA_HEADERS
        if (std::string why = s.make_current(); !why.empty()) {
            out.reason = s.fail(c, why);
            return out;
        }
        CUresult rc = s.driver->api().mem_host_register(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE);
        if (rc != CUDA_SUCCESS) {
            out.reason = s.fail(c, "cuMemHostRegister(" + format_mib(bytes) + ") returned " + s.driver->describe(rc));
            return out;
        }
#endif
    }
    s.registered.push_back(span);
    detail::StagingState::succeed(c, bytes);
    out.value.state_ = state_;
    out.value.ptr_ = ptr;
    out.value.bytes_ = bytes;
    return out;
}

StagingBackend HostStaging::backend() const { return state_->backend; }
const StagingLimits & HostStaging::limits() const { return state_->limits; }

RouteCounters HostStaging::pinned_counters() const {
    std::lock_guard lock(state_->mutex);
    return state_->pinned;
}

RouteCounters HostStaging::registration_counters() const {
    std::lock_guard lock(state_->mutex);
    return state_->registration;
}

nlohmann::json HostStaging::to_json() const {
    std::lock_guard lock(state_->mutex);
    const auto & l = state_->limits;
    return {{"backend", to_string(state_->backend)},
            {"limits", {{"pinned_route", l.pinned_route ? "on" : "off"},
                        {"pinned_route_reason", l.pinned_route ? nlohmann::json(nullptr) : nlohmann::json(l.pinned_route_reason)},
                        {"pinned_limit", l.pinned_limit},
                        {"registration", to_string(l.registration)},
                        {"registration_ceiling", l.registration == RegistrationMode::bounded
                                                     ? nlohmann::json(l.registration_ceiling)
                                                     : nlohmann::json(nullptr)},
                        {"ram_headroom", l.ram_headroom}}},
            {"pinned", state_->pinned.to_json()},
            {"registration", state_->registration.to_json()}};
}

}  // namespace ddo::platform
