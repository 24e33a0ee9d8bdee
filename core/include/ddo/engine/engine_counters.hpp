// Engine counters for the run report (docs/metrics.md, "Engine counters"). Unavailable values are
// nullopt and serialise as null with a "<field>_reason", never as 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/engine/transport.hpp"

namespace ddo::engine {

struct EngineCounters {
    std::string transport;                     // "cpu" | "cuda"
    std::uint64_t bytes_resident = 0;          // uploaded once into resident buffers
    std::uint64_t mapped_bytes = 0;            // resident payload read in place from the file mapping (host transport)
    std::uint64_t mapped_groups = 0;
    std::uint64_t staging_released_bytes = 0;  // staging freed once the residents were in and nothing streams
    std::uint64_t bytes_from_pinned = 0;       // streamed into slots, per source
    std::uint64_t bytes_from_pageable = 0;
    std::uint64_t bytes_from_file = 0;
    std::uint64_t host_copy_fill_bytes = 0;    // read from the weight files into host copies (pinned/pageable) at prepare
    std::uint64_t direct_fallbacks = 0;        // read_mode direct reads that went through buffered pread
    std::string direct_fallback_reason;        // why (the O_DIRECT open's or read's errno)
    std::uint64_t uploads = 0;                 // copy jobs submitted (resident + streamed)
    double upload_enqueue_s = 0;               // host time spent submitting copies
    double upload_copy_s = 0;                  // transport worker time copying (CPU: the copy itself)
    std::optional<double> upload_event_s;      // CUDA: completed-event time of the uploads
    std::string upload_event_reason;
    std::optional<double> stall_s;             // compute waiting for an upload (host-observed)
    std::string stall_reason;
    std::uint64_t hits = 0;                    // acquire found the group resident or prefetched
    std::uint64_t misses = 0;                  // acquire had to start the upload itself
    std::uint64_t skipped_groups = 0;          // groups the compute did not run in a pass (Engine::skip: a step cache)
    std::uint64_t bytes_skipped = 0;           // payload of the skipped groups that stream (residents skip 0 bytes)
    std::uint64_t pinned_bytes = 0;            // pinned host memory held for streamed groups (actually pinned)
    std::uint64_t pageable_bytes = 0;          // pageable host copies held for streamed groups (fallbacks included)
    std::uint64_t registered_bytes = 0;        // of pageable_bytes: page-locked by the registration route
    std::uint64_t staging_bytes = 0;           // disk route staging buffers
    std::uint64_t staging_pinned_bytes = 0;    // of staging_bytes: pinned (page-locked)
    std::uint64_t pinned_fallbacks = 0;        // buffers wanted pinned (host copies, staging) left pageable
    std::uint64_t pinned_fallback_bytes = 0;
    std::vector<std::string> pinned_fallback_reasons;  // the pinned route's answers, distinct, first 8
    std::uint64_t device_bytes = 0;            // residents + slots
    std::uint64_t failures = 0;                // failed uploads or allocator calls
    std::vector<std::string> failure_reasons;  // what failed where the failure has no other record, first 8
    std::uint64_t quarantines = 0;             // buffers withheld after a refused release
    std::uint64_t close_refusals = 0;
    std::uint64_t outstanding_owners = 0;      // live leases + uploads in flight, now
    std::vector<std::pair<std::string, std::uint64_t>> phase_end_owners;  // per phase end; must be 0
    std::optional<LinkMeasurement> link;       // measured when the engine prepared slots (it streams)
    std::string link_reason;                   // why there is none

    // Bytes copied into resident buffers and slots, every source (bytes_moved in the report, summed).
    std::uint64_t bytes_moved_total() const { return bytes_resident + bytes_from_pinned + bytes_from_pageable + bytes_from_file; }
    // Achieved upload rate: bytes moved (resident + streamed) over the completed-event time when the transport has
    // it, else over the copy worker's wall time; nullopt with the reason when nothing was uploaded.
    std::optional<double> upload_gb_per_s(std::string * clock, std::string * reason) const;

    nlohmann::json to_json() const;
};

}  // namespace ddo::engine
