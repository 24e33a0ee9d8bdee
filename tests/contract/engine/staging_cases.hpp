// The engine staging cases, shared by the host-backend contract (contract/engine/engine_staging_test.cpp, CPU
// transport) and its CUDA counterpart (cuda/engine/engine_staging_cuda_test.cpp, CUDA transport): the route
// configurations, the staging factory, and the counter expectations that must hold on either backend, since the
// engine asks HostStaging the same questions whatever the backend. What differs per file is how a run is
// executed and compared (CPU: the synthetic forward's output; CUDA: the bytes copied back from the leases).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/engine/engine.hpp"
#include "ddo/platform/host_staging.hpp"

namespace ddo::testing::staging {

// dynamic: group 0 resident, group 1 pinned, groups 2 and 3 pageable (pinned budget = one group).
// dynamic_pageable: group 0 resident, groups 1..3 pageable (pinned budget 0).
// Resident groups are uploaded from the file through the staging buffers (2), which come from the pinned route.
// The expectations below assume a layout of 4 equal groups.
enum class Case { resident, dynamic, dynamic_pageable, disk, group_block };

inline const char * name(Case k) {
    switch (k) {
    case Case::resident: return "resident";
    case Case::dynamic: return "dynamic";
    case Case::dynamic_pageable: return "dynamic_pageable";
    case Case::disk: return "disk";
    case Case::group_block: return "group_block";
    }
    return "?";
}

inline engine::EngineConfig config(Case k, const engine::ModelLayout & layout) {
    engine::EngineConfig cfg;
    cfg.ram_headroom = 0;
    cfg.device_headroom = 0;
    switch (k) {
    case Case::resident: cfg.route = engine::Route::resident; break;
    case Case::dynamic:
    case Case::dynamic_pageable:
        cfg.route = engine::Route::dynamic;
        cfg.resident_budget = layout.group(0).bytes;
        cfg.pinned_budget = k == Case::dynamic ? layout.group(1).bytes : 0;
        break;
    case Case::disk: cfg.route = engine::Route::disk; break;
    case Case::group_block: cfg.route = engine::Route::group_block; break;  // auto pinned budget: every group pinned
    }
    return cfg;
}

// nullptr with *reason when the backend cannot be created (CUDA: no driver or device).
inline std::unique_ptr<platform::HostStaging> create(platform::StagingBackend backend, platform::StagingLimits limits,
                                                     std::string * reason) {
    return platform::HostStaging::create(backend, limits, nullptr, reason);
}

template <typename T>
bool bitwise_equal(const std::vector<T> & a, const std::vector<T> & b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

inline bool any_reason_contains(const nlohmann::json & reasons, const std::string & needle) {
    for (const auto & r : reasons)
        if (r.get<std::string>().find(needle) != std::string::npos) return true;
    return false;
}

// A staged route with default limits (no pinned limit, registration full): every pinned request succeeded on the
// pinned route, pageable copies were registered, everything came back at close. `report` is Engine::to_json()
// after close; gb is one group's payload bytes.
inline void expect_staged_route_counters(Case k, const nlohmann::json & report, std::uint64_t gb) {
    const std::string nm = name(k);
    const auto & c = report.at("counters");
    const auto & hs = report.at("host_staging");
    EXPECT_EQ(c.at("failures"), 0) << nm;
    EXPECT_EQ(c.at("pinned_fallbacks"), 0) << nm << ": " << report.dump();
    EXPECT_EQ(hs.at("pinned").at("failures"), 0) << nm;
    EXPECT_EQ(hs.at("pinned").at("refusals"), 0) << nm;
    // Everything the engine took came back at close.
    EXPECT_EQ(hs.at("pinned").at("bytes_current"), 0) << nm;
    EXPECT_EQ(hs.at("registration").at("bytes_current"), 0) << nm;
    if (k == Case::dynamic) {
        // 1 pinned host copy + the 2 staging buffers the resident group is uploaded through (from the file);
        // the 2 pageable copies registered (mode full).
        EXPECT_EQ(hs.at("pinned").at("successes"), 3);
        EXPECT_EQ(c.at("staging_pinned_bytes"), c.at("staging_bytes"));
        EXPECT_EQ(hs.at("registration").at("attempts"), 2);
        EXPECT_EQ(hs.at("registration").at("successes"), 2);
        EXPECT_EQ(c.at("pinned_bytes"), gb);
        EXPECT_EQ(c.at("registered_bytes"), 2 * gb);
    } else if (k == Case::dynamic_pageable) {  // the 2 staging buffers pinned; the 3 pageable copies registered
        EXPECT_EQ(hs.at("pinned").at("successes"), 2);
        EXPECT_EQ(c.at("staging_pinned_bytes"), c.at("staging_bytes"));
        EXPECT_EQ(hs.at("registration").at("attempts"), 3);
        EXPECT_EQ(hs.at("registration").at("successes"), 3);
        EXPECT_EQ(c.at("pinned_bytes"), 0);
        EXPECT_EQ(c.at("registered_bytes"), 3 * gb);
    } else if (k == Case::disk) {  // the 2 staging buffers from the pinned route; nothing to register
        EXPECT_EQ(hs.at("pinned").at("successes"), 2);
        EXPECT_EQ(c.at("staging_pinned_bytes"), c.at("staging_bytes"));
        EXPECT_EQ(hs.at("registration").at("attempts"), 0);
    } else if (k == Case::group_block) {  // every group pinned
        EXPECT_EQ(hs.at("pinned").at("successes"), 4);
        EXPECT_EQ(c.at("pinned_bytes"), 4 * gb);
        EXPECT_EQ(hs.at("registration").at("attempts"), 0);
    } else {
        ADD_FAILURE() << "no staged-route expectations for " << nm;
    }
}

// pinned_limit below one group (and one staging buffer), registration full: every pinned request (disk: the 2
// staging buffers; group_block: the 4 pinned host copies) was refused and fell back to pageable memory, counted
// by the engine with the route's reason; the registration route was not tried in its place.
inline void expect_pinned_fallbacks(Case k, const nlohmann::json & report, std::uint64_t gb) {
    const std::string nm = name(k);
    const std::uint64_t wanted = k == Case::disk ? 2 : 4;  // staging buffers / pinned host copies
    const auto & c = report.at("counters");
    const auto & p = report.at("host_staging").at("pinned");
    const auto & r = report.at("host_staging").at("registration");
    EXPECT_EQ(p.at("attempts"), wanted) << nm;
    EXPECT_EQ(p.at("refusals"), wanted) << nm;
    EXPECT_EQ(p.at("successes"), 0) << nm;
    EXPECT_EQ(c.at("pinned_fallbacks"), wanted) << nm;
    EXPECT_GE(c.at("pinned_fallback_bytes").get<std::uint64_t>(), wanted * gb) << nm;
    EXPECT_TRUE(any_reason_contains(c.at("pinned_fallback_reasons"), "pinned_limit")) << c.dump();
    EXPECT_EQ(c.at("pinned_bytes"), 0) << nm;
    if (k == Case::disk) EXPECT_EQ(c.at("staging_pinned_bytes"), 0);
    else EXPECT_EQ(c.at("pageable_bytes"), 4 * gb);
    // The registration route was not tried in the pinned route's place.
    EXPECT_EQ(r.at("attempts"), 0) << nm << ": " << r.dump();
    EXPECT_EQ(r.at("successes"), 0);
    EXPECT_EQ(r.at("refusals"), 0);
    EXPECT_EQ(r.at("bytes_total"), 0);
}

// dynamic_pageable with registration off: never attempted; the 3 pageable copies stay pageable.
inline void expect_registration_off(const nlohmann::json & report, std::uint64_t gb) {
    const auto & r = report.at("host_staging").at("registration");
    EXPECT_EQ(r.at("attempts"), 0) << r.dump();
    EXPECT_EQ(r.at("refusals"), 0);
    EXPECT_EQ(report.at("counters").at("registered_bytes"), 0);
    EXPECT_EQ(report.at("counters").at("pageable_bytes"), 3 * gb);
    EXPECT_EQ(report.at("host_staging").at("limits").at("registration"), "off");
}

}  // namespace ddo::testing::staging
