// The transport's link measurement (one copy of each kind, timed by the transport's own clock).
#include "ddo/engine/transport.hpp"

#include <cstring>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::engine {

nlohmann::json LinkMeasurement::to_json() const {
    nlohmann::json j;
    j["bytes"] = bytes;
    j["pinned_gb_per_s"] = pinned_gb_per_s ? nlohmann::json(*pinned_gb_per_s) : nlohmann::json(nullptr);
    j["pageable_gb_per_s"] = pageable_gb_per_s ? nlohmann::json(*pageable_gb_per_s) : nlohmann::json(nullptr);
    j["clock"] = clock;
    j["reason"] = reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(reason);
    return j;
}

double Transport::time_link_copy(void *, const void *, std::uint64_t) {
    throw RuntimeError("the " + name() + " transport does not measure its link");
}

LinkMeasurement Transport::measure_link(void * device_dst, std::uint64_t bytes) {
    LinkMeasurement m;
    m.bytes = bytes;
    m.clock = link_clock();
    if (bytes == 0) {
        m.reason = "no destination bytes to copy into";
        return m;
    }
    try {
        // Both sources touched first: the copy is timed, not the first-touch faults.
        HostBuffer pinned = allocate_host(bytes, true);
        std::memset(pinned.data(), 1, static_cast<std::size_t>(bytes));
        m.pinned_gb_per_s = static_cast<double>(bytes) / time_link_copy(device_dst, pinned.data(), bytes) / 1e9;
        HostBuffer pageable = HostBuffer::pageable(bytes, 4096);
        std::memset(pageable.data(), 1, static_cast<std::size_t>(bytes));
        m.pageable_gb_per_s = static_cast<double>(bytes) / time_link_copy(device_dst, pageable.data(), bytes) / 1e9;
    } catch (const std::exception & e) {
        m.reason = std::string("link measurement failed: ") + e.what();
    }
    return m;
}

}  // namespace ddo::engine
