// The residency planner: from budgets (EngineConfig, mapped from a preset by the caller) and observed
// capacities, decide per group: resident on the device, or streamed from pinned host memory, from
// pageable host memory, or from the checkpoint file. Every decision carries a reason string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/engine/capacities.hpp"
#include "ddo/engine/group_layout.hpp"
#include "ddo/engine/route.hpp"
#include "ddo/store/read_mode.hpp"

namespace ddo::engine {

enum class SelectionPolicy { first, spread, largest };
std::string_view to_string(SelectionPolicy p) noexcept;
std::optional<SelectionPolicy> parse_selection_policy(std::string_view s) noexcept;

enum class Residency { resident, pinned, pageable, file };
std::string_view to_string(Residency r) noexcept;

// Budgets and knobs (bytes). nullopt budget = "auto" (derived from capacities; unknown capacity ->
// the conservative choice). Another engineer maps preset keys onto this struct.
struct EngineConfig {
    Route route = Route::dynamic;
    std::optional<std::uint64_t> device_budget;    // bytes of device memory for residents + slots
    std::optional<std::uint64_t> resident_budget;  // bytes of resident groups (dynamic)
    std::optional<std::uint64_t> pinned_budget;    // bytes of pinned host memory for streamed groups
    std::uint64_t ram_headroom = 2ull << 30;       // kept free of pinned/pageable host copies
    std::uint64_t device_headroom = 512ull << 20;  // kept free on the device
    std::uint32_t slots = 2;                       // >= 2
    // Groups uploaded ahead of compute: at most slots - 1 (the default). 0 = none: a streamed group is uploaded
    // when it is acquired (capacities.prefetch_depth = 0, components.<c>.use_stream = false).
    std::optional<std::uint32_t> prefetch_depth;
    SelectionPolicy policy = SelectionPolicy::first;
    double snap_to_full_pin = 0.95;                // pin everything when budget >= 95 % of candidates
    std::uint32_t staging_slots = 2;               // disk route: host staging buffers (each fits a group)
    store::ReadMode read_mode = store::ReadMode::pread;  // disk route / host copies from the file
    // Per layout group, the bytes it occupies when resident where that is not its layout bytes (a group the caller
    // converts once into a wider compute dtype, Note [Converted residents] in docs/architecture.md); empty: the
    // layout's. Residents are budgeted with these; slots and host copies keep the layout's bytes.
    std::vector<std::uint64_t> resident_bytes;
    // Groups the dynamic route keeps resident before the policy picks the rest, in this order, each when it fits the
    // resident budget: the blocks that run on every step while a step cache skips others (Note [Step caching]).
    std::vector<std::size_t> resident_first;
};
using PlannerInput = EngineConfig;

struct GroupDecision {
    std::size_t group = 0;
    std::string name;
    std::uint64_t bytes = 0;
    Residency residency = Residency::pageable;
    std::string reason;
};

struct Plan {
    Route route = Route::dynamic;
    std::uint32_t slots = 0;              // 0 when nothing streams
    std::uint32_t prefetch_depth = 0;     // slots - 1
    std::uint64_t slot_bytes = 0;         // largest streamed group
    std::uint32_t staging_slots = 0;      // disk route
    std::uint64_t resident_bytes = 0, pinned_bytes = 0, pageable_bytes = 0, file_bytes = 0;
    bool pin_snapped_to_full = false;
    store::ReadMode read_mode = store::ReadMode::pread;
    std::vector<GroupDecision> groups;    // one per layout group, in execution order
    std::vector<std::string> notes;       // plan-level reasons (budgets derived, refusals)

    std::vector<std::size_t> streamed() const;  // execution order of the streamed groups
    nlohmann::json to_json() const;
};

// Throws UsageError for an impossible configuration (slots < 2 with streamed groups, device budget
// below one slot, ...), naming the key and the next step.
Plan plan_residency(const ModelLayout & layout, const EngineConfig & cfg, const Capacities & caps);

}  // namespace ddo::engine
