// HostStaging: page-locked host memory for uploads, through two separate routes with separate limits
// (seed 000: "success with one path does not establish capacity for the other"):
//  - pinned allocation: new memory, pinned from the start (CUDA: cuMemHostAlloc; host backend:
//    mmap + mlock), bounded by pinned_limit;
//  - registration: pinning memory that already exists, e.g. a mapped checkpoint or a source buffer
//    (CUDA: cuMemHostRegister; host backend: mlock of the range), governed by
//    registration = full | bounded | off, and a ceiling when bounded.
// A failure of one route is never used as the answer of the other: there is no fallback inside;
// each route's attempts, successes, failures, refusals, bytes and reasons are counted on their own.
// A pinned allocation (new memory) asks LinuxAdmission (when given) before it grows; a registration
// adds no memory (what it locks is already committed and counted) and is bounded by its mode and
// ceiling. The host backend checks RLIMIT_MEMLOCK, which both of its routes share.
// See Note [Host staging routes].
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::platform {

class LinuxAdmission;

enum class StagingBackend { host, cuda };
enum class RegistrationMode { full, bounded, off };

const char * to_string(StagingBackend backend);
const char * to_string(RegistrationMode mode);
// "full" | "bounded" | "off"; nullopt otherwise.
std::optional<RegistrationMode> parse_registration_mode(std::string_view text);

struct StagingLimits {
    // false: the pinned route is off (a deliberate choice, e.g. capacities.pin_host_memory = false): the engine
    // never asks it, and allocate_pinned refuses without any call. pinned_route_reason says why (the setting).
    bool pinned_route = true;
    std::string pinned_route_reason;
    std::uint64_t pinned_limit = 0;          // bytes of pinned allocations held at once; 0 = no limit
    RegistrationMode registration = RegistrationMode::full;
    std::uint64_t registration_ceiling = 0;  // bounded: bytes registered at once (must be > 0)
    std::uint64_t ram_headroom = 0;          // passed to admission with every growth
};

// Counters of one route; they go into the run report as they are.
struct RouteCounters {
    std::uint64_t attempts = 0;
    std::uint64_t successes = 0;
    std::uint64_t failures = 0;   // the OS or driver call failed
    std::uint64_t refusals = 0;   // refused before any call: limit, mode off, admission
    std::uint64_t bytes_current = 0;
    std::uint64_t bytes_peak = 0;
    std::uint64_t bytes_total = 0;  // sum of successful requests
    std::vector<std::string> reasons;  // distinct failure/refusal reasons, first 8
    nlohmann::json to_json() const;
};

class HostStaging;

namespace detail {
struct StagingState;
enum class StagingRoute { pinned, registration };
// Hands a range back to the route it came from (HostStaging's state; host_staging.cpp).
void release_range(StagingState & state, StagingRoute route, void * ptr, std::uint64_t bytes) noexcept;

// What a pinned buffer and a registration share: move-only ownership of one page-locked range, handed back to
// its own route on destruction. One type per route (PinnedBuffer, HostRegistration): neither stands for the other.
template <StagingRoute R>
class LockedRange {
public:
    LockedRange() = default;
    LockedRange(LockedRange && o) noexcept
        : state_(std::move(o.state_)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    LockedRange & operator=(LockedRange && o) noexcept {
        if (this != &o) {
            reset();
            state_ = std::move(o.state_);
            ptr_ = std::exchange(o.ptr_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    LockedRange(const LockedRange &) = delete;
    LockedRange & operator=(const LockedRange &) = delete;
    ~LockedRange() { reset(); }
    void * data() const { return ptr_; }
    std::uint64_t size() const { return bytes_; }
    explicit operator bool() const { return ptr_ != nullptr; }

private:
    friend class ddo::platform::HostStaging;
    void reset() noexcept {
        if (ptr_ != nullptr && state_) release_range(*state_, R, ptr_, bytes_);
        ptr_ = nullptr;
        bytes_ = 0;
        state_.reset();
    }
    std::shared_ptr<StagingState> state_;  // shared with HostStaging: the buffer may outlive it
    void * ptr_ = nullptr;
    std::uint64_t bytes_ = 0;
};
}  // namespace detail

// A pinned allocation. Move-only; frees (munlock+munmap or cuMemFreeHost) on destruction.
using PinnedBuffer = detail::LockedRange<detail::StagingRoute::pinned>;
// A registration of an existing range. Move-only; unregisters (munlock or cuMemHostUnregister) on
// destruction. The memory itself stays owned by whoever owned it before.
using HostRegistration = detail::LockedRange<detail::StagingRoute::registration>;

template <typename T>
struct StagingResult {
    T value;             // empty (false) on failure
    std::string reason;  // why, when empty
};

class HostStaging {
public:
    // admission: borrowed, may be null (then only the route limits and RLIMIT_MEMLOCK apply); it must
    // outlive the staging. CUDA: returns nullptr with *reason when no driver or device is usable.
    static std::unique_ptr<HostStaging> create(StagingBackend backend, StagingLimits limits,
                                               const LinuxAdmission * admission, std::string * reason);
    ~HostStaging();

    StagingResult<PinnedBuffer> allocate_pinned(std::uint64_t bytes);
    // ptr/bytes: borrowed range owned by the caller, which must outlive the registration.
    StagingResult<HostRegistration> register_range(void * ptr, std::uint64_t bytes);

    StagingBackend backend() const;
    const StagingLimits & limits() const;
    RouteCounters pinned_counters() const;
    RouteCounters registration_counters() const;
    // {"backend", "limits": {"pinned_route": "on"|"off", "pinned_route_reason", "pinned_limit", "registration",
    //  "registration_ceiling", "ram_headroom"}, "pinned": {...}, "registration": {...}} for the run report.
    nlohmann::json to_json() const;

private:
    explicit HostStaging(std::shared_ptr<detail::StagingState> state);
    std::shared_ptr<detail::StagingState> state_;  // shared with every live buffer/registration
};

}  // namespace ddo::platform
