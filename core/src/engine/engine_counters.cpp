#include "ddo/engine/engine_counters.hpp"

#include <nlohmann/json.hpp>

namespace ddo::engine {

std::optional<double> EngineCounters::upload_gb_per_s(std::string * clock, std::string * reason) const {
    const std::uint64_t bytes = bytes_moved_total();
    if (bytes == 0) {
        *reason = mapped_bytes > 0 ? "nothing was uploaded: the residents are read in place from the file mapping"
                                   : "nothing was uploaded";
        return std::nullopt;
    }
    if (upload_event_s && *upload_event_s > 0) {
        *clock = "CUDA events (completed upload intervals)";
        return static_cast<double>(bytes) / *upload_event_s / 1e9;
    }
    if (upload_copy_s > 0) {
        *clock = "host wall (copy worker time copying and reading)";
        return static_cast<double>(bytes) / upload_copy_s / 1e9;
    }
    *reason = "no upload time was recorded";
    return std::nullopt;
}

nlohmann::json EngineCounters::to_json() const {
    nlohmann::json j;
    j["transport"] = transport;
    j["bytes_moved"] = {{"resident", bytes_resident}, {"pinned", bytes_from_pinned},
                        {"pageable", bytes_from_pageable}, {"file", bytes_from_file}};
    // read_mode = direct as it ran: reads that fell back to buffered pread, and why (the plan records what was asked).
    j["direct_fallbacks"] = direct_fallbacks;
    j["direct_fallback_reason"] = direct_fallbacks ? nlohmann::json(direct_fallback_reason) : nlohmann::json(nullptr);
    j["host_copy_fill_bytes"] = host_copy_fill_bytes;
    j["mapped_bytes"] = mapped_bytes;
    j["mapped_groups"] = mapped_groups;
    j["staging_released_bytes"] = staging_released_bytes;
    j["uploads"] = uploads;
    j["upload_enqueue_s"] = upload_enqueue_s;
    // Never measured is null, not 0 (issue 16): a copy time exists once something was uploaded.
    if (uploads > 0 || upload_copy_s > 0) j["upload_copy_s"] = upload_copy_s;
    else { j["upload_copy_s"] = nullptr; j["upload_copy_s_reason"] = "nothing was uploaded"; }
    if (upload_event_s) j["upload_event_s"] = *upload_event_s;
    else { j["upload_event_s"] = nullptr; j["upload_event_s_reason"] = upload_event_reason; }
    if (stall_s) j["stall_s"] = *stall_s;
    else { j["stall_s"] = nullptr; j["stall_s_reason"] = stall_reason; }
    j["hits"] = hits;
    j["misses"] = misses;
    j["skipped_groups"] = skipped_groups;
    j["bytes_skipped"] = bytes_skipped;
    j["pinned_bytes"] = pinned_bytes;
    j["pageable_bytes"] = pageable_bytes;
    j["registered_bytes"] = registered_bytes;
    j["staging_bytes"] = staging_bytes;
    j["staging_pinned_bytes"] = staging_pinned_bytes;
    j["pinned_fallbacks"] = pinned_fallbacks;
    j["pinned_fallback_bytes"] = pinned_fallback_bytes;
    j["pinned_fallback_reasons"] = pinned_fallback_reasons;
    j["device_bytes"] = device_bytes;
    j["failures"] = failures;
    j["failure_reasons"] = failure_reasons;
    j["quarantines"] = quarantines;
    j["close_refusals"] = close_refusals;
    j["outstanding_owners"] = outstanding_owners;
    std::string clock, reason;
    if (const auto r = upload_gb_per_s(&clock, &reason)) {
        j["upload_gb_per_s"] = *r;
        j["upload_gb_per_s_clock"] = clock;
    } else {
        j["upload_gb_per_s"] = nullptr;
        j["upload_gb_per_s_reason"] = reason;
    }
    if (link) j["link"] = link->to_json();
    else { j["link"] = nullptr; j["link_reason"] = link_reason.empty() ? "not measured" : link_reason; }
    auto & pe = j["phase_end_owners"] = nlohmann::json::array();
    for (const auto & [phase, n] : phase_end_owners) pe.push_back({{"phase", phase}, {"outstanding_owners", n}});
    return j;
}

}  // namespace ddo::engine
