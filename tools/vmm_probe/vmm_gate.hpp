// The seed's VMM gate over any allocator vtable: two 4 MiB buffers in a pool with 8 MiB physical /
// 24 MiB virtual limits, one 4 MiB reclaim and recreation at a stable address, exact payloads (XXH3),
// leased and pending refusals, a checked close, and final ownership and failure counters.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/ddo_allocator_plugin.h"

namespace ddo::probe {

struct GateInput {
    const ddo_allocator_vtable * vt = nullptr;  // borrowed
    ddo_alloc_backend backend = DDO_ALLOC_BACKEND_HOST;
    // The plugin's last set_error message, when the loader can see it ("" otherwise).
    std::function<std::string()> last_error;
};

// Runs every check; returns the report ("passed" is true only when every check passed).
nlohmann::json run_vmm_gate(const GateInput & input);

}  // namespace ddo::probe
