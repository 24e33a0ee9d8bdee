// A transport moves one group payload into a slot, asynchronously, and orders compute after it.
//   CPU transport (cpu_transport.hpp): a worker thread; the "device" is host memory. CI runs this.
//   CUDA transport (ddo/torch/cuda_transport.hpp): a copy stream, pinned staging, CUDA events; the
//   compute stream waits on the upload's event, the host never does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ddo/engine/fence.hpp"
#include "ddo/engine/host_buffer.hpp"
#include "ddo/engine/planner.hpp"

namespace ddo::engine {

struct CopyJob {
    std::size_t group = 0;
    std::string group_name;           // for errors
    void * dst = nullptr;             // slot (device memory; host memory on the CPU transport)
    std::uint64_t bytes = 0;          // whole group payload
    Residency source = Residency::pageable;
    const void * src = nullptr;       // pinned / pageable host payload (contiguous group layout)
    // src (or, for a file source, staging) is page-locked memory (pinned, or pageable memory registered by
    // HostStaging): the CUDA transport copies from it directly; otherwise through its pinned bounce chunks.
    // `source` says what the plan wanted; this says what the memory is (a pinned fallback is not locked).
    bool host_locked = false;
    // File source: fill(staging) writes the group payload into `staging` (bytes long) on a worker,
    // then staging is copied to dst. `staging_free` must complete before fill starts (the previous
    // copy out of that staging buffer). A host transport given no staging (null) fills dst itself: one copy.
    std::function<void(void * staging)> fill;
    void * staging = nullptr;
    FencePtr staging_free;
    // The slot's previous readers: the copy into dst starts only after this completes.
    FencePtr slot_free;
};

struct TransportStats {
    double copy_s = 0;                   // worker wall time spent copying (and filling staging)
    double fill_s = 0;                   // of which: reading from the file into staging
    double copy_cpu_s = 0;               // the worker thread's CPU time over the same spans (CPU
                                         // transport): copy_s - copy_cpu_s ~ time preempted
    std::optional<double> event_s;       // CUDA: sum of completed upload event durations
    std::string event_reason;            // why event_s is null
    std::uint64_t jobs = 0, failures = 0;
};

// One large host -> device copy of each kind, timed once when an engine that streams prepares (the report's
// `link`): the bandwidth the streamed bytes are bounded by. Missing figures are nullopt with the reason.
struct LinkMeasurement {
    std::uint64_t bytes = 0;                  // per copy
    std::optional<double> pinned_gb_per_s;    // from page-locked host memory (CPU transport: touched host memory)
    std::optional<double> pageable_gb_per_s;  // from ordinary pageable host memory
    std::string clock;                        // "CUDA events" | "host wall"
    std::string reason;                       // why a figure is missing (empty when both are there)

    nlohmann::json to_json() const;
};

class Transport {
public:
    virtual ~Transport() = default;
    virtual std::string name() const = 0;               // "cpu" | "cuda"
    virtual bool device_is_host() const = 0;            // slots live in host memory
    virtual int device_ordinal() const = 0;             // -1 for the host
    // Asynchronous; returns the completion fence of the copy. Failures complete the fence with an
    // error (rethrown by host_wait / compute_wait) and are counted.
    virtual FencePtr submit(CopyJob job) = 0;
    // Orders subsequent compute after f. CPU: the host (the compute thread) waits; returns the time
    // it waited. CUDA: the current compute stream waits on f's event; returns 0 (never blocks).
    virtual double compute_wait(Fence & f) = 0;
    // A fence that completes when the compute issued so far has completed (CPU: ready now).
    virtual FencePtr compute_fence() = 0;
    // Waits for every submitted job. Throws the first failure not yet observed.
    virtual void drain() = 0;
    virtual TransportStats stats() const = 0;
    // Host memory the transport copies from best (pinned on CUDA). Throws RuntimeError on failure.
    virtual HostBuffer allocate_host(std::uint64_t bytes, bool pinned) = 0;
    // Observed device capacities (device_free/total); nullopt fields when unknown.
    virtual Capacities observe_device() const = 0;
    // Times one copy of `bytes` into `device_dst` (device memory the caller owns and nothing reads yet) from pinned
    // memory (allocate_host(bytes, true)) and from pageable memory, each with time_link_copy; call it while no job is
    // in flight. Never throws: failures become the reason.
    LinkMeasurement measure_link(void * device_dst, std::uint64_t bytes);
    // Seconds one copy of `bytes` from host `src` into device `dst` takes, on link_clock(). Throws RuntimeError where
    // the transport cannot time it (the default).
    virtual double time_link_copy(void * dst, const void * src, std::uint64_t bytes);
    virtual std::string link_clock() const { return "host wall"; }
};

}  // namespace ddo::engine
