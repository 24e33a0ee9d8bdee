// The residency planner (ddo/engine/planner.hpp). Policies and the snap-to-full rule follow the DDO
// anchor's balanced planner (research/ddo-anchor.md §4.4); unknown observations refuse growth.
#include "ddo/engine/planner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/util/format_bytes.hpp"

namespace ddo::engine {

std::string_view to_string(SelectionPolicy p) noexcept {
    switch (p) {
        case SelectionPolicy::first: return "first";
        case SelectionPolicy::spread: return "spread";
        case SelectionPolicy::largest: return "largest";
    }
    return "?";
}

std::optional<SelectionPolicy> parse_selection_policy(std::string_view s) noexcept {
    if (s == "first") return SelectionPolicy::first;
    if (s == "spread") return SelectionPolicy::spread;
    if (s == "largest") return SelectionPolicy::largest;
    return std::nullopt;
}

std::string_view to_string(Residency r) noexcept {
    switch (r) {
        case Residency::resident: return "resident";
        case Residency::pinned: return "pinned";
        case Residency::pageable: return "pageable";
        case Residency::file: return "file";
    }
    return "?";
}

namespace {

// Candidate order under a policy (indices into `items`, whose bytes are `bytes`).
std::vector<std::size_t> policy_order(const std::vector<std::size_t> & items, const std::vector<std::uint64_t> & bytes,
                                      SelectionPolicy policy, std::uint64_t budget) {
    std::vector<std::size_t> order = items;
    const std::size_t n = items.size();
    if (policy == SelectionPolicy::largest) {
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bytes[a] > bytes[b]; });
    } else if (policy == SelectionPolicy::spread && n > 2) {
        std::uint64_t total = 0;
        for (auto i : items) total += bytes[i];
        const double avg = std::max(1.0, static_cast<double>(total) / static_cast<double>(n));
        std::size_t target = static_cast<std::size_t>(std::clamp<double>(std::floor(static_cast<double>(budget) / avg), 1.0, static_cast<double>(n)));
        std::vector<std::size_t> picks;
        if (target == 1) picks.push_back(n / 2);
        else
            for (std::size_t p = 0; p < target; ++p)
                picks.push_back(static_cast<std::size_t>(std::lround(static_cast<double>(p) * static_cast<double>(n - 1) / static_cast<double>(target - 1))));
        std::vector<bool> taken(n, false);
        order.clear();
        for (auto k : picks) if (!taken[k]) { taken[k] = true; order.push_back(items[k]); }
        for (std::size_t k = 0; k < n; ++k) if (!taken[k]) order.push_back(items[k]);
    }
    return order;
}

}  // namespace

std::vector<std::size_t> Plan::streamed() const {
    std::vector<std::size_t> s;
    for (const auto & g : groups) if (g.residency != Residency::resident) s.push_back(g.group);
    return s;
}

nlohmann::json Plan::to_json() const {
    nlohmann::json j;
    j["route"] = std::string(to_string(route));
    j["slots"] = slots;
    j["prefetch_depth"] = prefetch_depth;
    j["slot_bytes"] = slot_bytes;
    j["staging_slots"] = staging_slots;
    j["read_mode"] = std::string(store::to_string(read_mode));
    j["resident_bytes"] = resident_bytes;
    j["pinned_bytes"] = pinned_bytes;
    j["pageable_bytes"] = pageable_bytes;
    j["file_bytes"] = file_bytes;
    j["pin_snapped_to_full"] = pin_snapped_to_full;
    j["notes"] = notes;
    auto & gs = j["groups"] = nlohmann::json::array();
    for (const auto & g : groups)
        gs.push_back({{"group", g.group}, {"name", g.name}, {"bytes", g.bytes},
                      {"residency", std::string(to_string(g.residency))}, {"reason", g.reason}});
    return j;
}

namespace {

// The planner's steps (Note [Planner steps] in docs/architecture.md): capacities -> residents -> slots -> host copies
// -> reasons. Steps 1-4 decide and write the plan-level notes in that order; step 5 words the per-group reasons.

// What the steps read about the groups: the bytes a slot and a host copy hold (the layout's) and the bytes a group
// occupies when resident (Note [Converted residents]).
struct GroupBytes {
    std::vector<std::uint64_t> layout;    // per group
    std::vector<std::uint64_t> resident;  // per group
    std::uint64_t resident_total = 0;     // sum of `resident`
};

GroupBytes group_bytes(const ModelLayout & layout, const EngineConfig & cfg) {
    const std::size_t n = layout.size();
    GroupBytes b;
    b.layout.resize(n);
    for (std::size_t i = 0; i < n; ++i) b.layout[i] = layout.group(i).bytes;
    if (!cfg.resident_bytes.empty() && cfg.resident_bytes.size() != n)
        throw UsageError("planner: resident_bytes lists " + std::to_string(cfg.resident_bytes.size()) + " groups, the layout has " +
                         std::to_string(n));
    b.resident = cfg.resident_bytes.empty() ? b.layout : cfg.resident_bytes;
    b.resident_total = std::accumulate(b.resident.begin(), b.resident.end(), std::uint64_t(0));
    return b;
}

// Step 1, capacities: the device capacity residents and slots must fit: device_budget, else observed free memory
// minus headroom, else unknown. Notes where it came from.
std::optional<std::uint64_t> device_capacity(const EngineConfig & cfg, const Capacities & caps, std::vector<std::string> & notes) {
    if (cfg.device_budget) {
        notes.push_back("device capacity " + format_mib(*cfg.device_budget) + " from device_budget");
        return cfg.device_budget;
    }
    if (caps.device_free) {
        const std::uint64_t cap = *caps.device_free > cfg.device_headroom ? *caps.device_free - cfg.device_headroom : 0;
        notes.push_back("device capacity " + format_mib(cap) + " = observed free " + format_mib(*caps.device_free) + " - headroom " +
                        format_mib(cfg.device_headroom));
        return cap;
    }
    notes.push_back("device capacity unknown (no device_budget, device free memory not observed): no residents beyond what the route requires");
    return std::nullopt;
}

// A capacity the environment sets (observed free memory; on the CPU transport the host's, bounded by the process's
// memory cgroup) that cannot hold what the route needs is a runtime failure (exit 4) naming what was observed; a
// device_budget that cannot is the preset's (exit 2).
// what: what does not fit; budget_step / observed_step: the next step for each case.
[[noreturn]] void refuse_capacity(const EngineConfig & cfg, const Capacities & caps, const std::string & what, const std::string & budget_step,
                                  const std::string & observed_step) {
    if (cfg.device_budget) throw UsageError(what + "; " + budget_step);
    throw RuntimeError(what + " (" + (caps.device_source.empty() ? "observed free device memory " + format_mib(caps.device_free.value_or(0))
                                                                 : caps.device_source) +
                       ", minus headroom " + format_mib(cfg.device_headroom) + "); " + observed_step +
                       (caps.device_source.empty() ? "" : ", or give the process more memory (a larger memory cgroup limit)"));
}

// Why step 2 made a group resident or streamed it; step 5 words it.
enum class ResidentWhy { route_resident, route_component, whole_fits, selected, first, over_budget, route_streams };

struct Residents {
    std::vector<ResidentWhy> why;       // per group
    std::vector<std::size_t> streamed;  // the groups not resident, in execution order
    std::uint64_t bytes = 0;            // resident bytes (GroupBytes::resident)
    std::uint64_t budget = 0;           // route dynamic: the resident budget (0: growth refused)
    std::string budget_note;            // route dynamic: how that budget was derived
};

Residents all_resident(std::size_t n, ResidentWhy why, std::uint64_t bytes) {
    Residents r;
    r.why.assign(n, why);
    r.bytes = bytes;
    return r;
}

// Route dynamic: the bytes residents may take beside the slots, and how that was derived.
std::pair<std::uint64_t, std::string> resident_budget(const ModelLayout & layout, const EngineConfig & cfg,
                                                      std::optional<std::uint64_t> device_cap) {
    if (!device_cap) return {0, "device capacity unknown: resident growth refused"};
    const std::uint64_t largest = layout.largest_group_bytes();
    const std::uint64_t slot_cost = largest * cfg.slots;
    const std::uint64_t cap = *device_cap > slot_cost ? *device_cap - slot_cost : 0;
    const std::string slots_part = " - " + std::to_string(cfg.slots) + " slots x " + format_mib(largest);
    if (!cfg.resident_budget) return {cap, "resident budget " + format_mib(cap) + " = device capacity " + format_mib(*device_cap) + slots_part};
    const std::uint64_t budget = std::min(*cfg.resident_budget, cap);
    return {budget, "resident budget " + format_mib(budget) +
                        (budget < *cfg.resident_budget ? " (resident_budget " + format_mib(*cfg.resident_budget) + " capped by device capacity " +
                                                             format_mib(*device_cap) + slots_part + ")"
                                                       : " from resident_budget")};
}

// Route dynamic, the component not fitting whole: residents chosen by the policy within the resident budget.
Residents select_residents(const ModelLayout & layout, const EngineConfig & cfg, const GroupBytes & b,
                           std::optional<std::uint64_t> device_cap, std::vector<std::string> & notes) {
    const std::size_t n = layout.size();
    Residents r;
    std::tie(r.budget, r.budget_note) = resident_budget(layout, cfg, device_cap);
    notes.push_back(r.budget_note);
    r.why.assign(n, ResidentWhy::over_budget);
    std::vector<std::size_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    for (auto i : cfg.resident_first)  // a step cache's always-run blocks first (Note [Step caching])
        if (i < n && r.why[i] != ResidentWhy::first && r.bytes + b.resident[i] <= r.budget) {
            r.why[i] = ResidentWhy::first;
            r.bytes += b.resident[i];
        }
    if (r.budget > 0)
        for (auto i : policy_order(all, b.resident, cfg.policy, r.budget))
            if (r.why[i] == ResidentWhy::over_budget && r.bytes + b.resident[i] <= r.budget) {
                r.why[i] = ResidentWhy::selected;
                r.bytes += b.resident[i];
            }
    for (std::size_t i = 0; i < n; ++i)
        if (r.why[i] != ResidentWhy::selected && r.why[i] != ResidentWhy::first) r.streamed.push_back(i);
    return r;
}

// Step 2, residents: which groups stay on the device. Throws when the route keeps more than the device capacity, or
// streams with fewer than 2 slots. Notes the resident budget (dynamic) or a granularity the route does not expect.
Residents choose_residents(const ModelLayout & layout, const EngineConfig & cfg, const Capacities & caps, const GroupBytes & b,
                           std::optional<std::uint64_t> device_cap, std::vector<std::string> & notes) {
    const std::size_t n = layout.size();
    const std::string route_name(to_string(cfg.route));
    if (cfg.route == Route::resident || cfg.route == Route::component) {
        if (device_cap && b.resident_total > *device_cap)
            refuse_capacity(cfg, caps,
                            "route " + route_name + " keeps the whole component (" + format_mib(b.resident_total) +
                                ") on the device, but the device capacity is " + format_mib(*device_cap),
                            "choose route = \"dynamic\" or \"group_block\", or raise device_budget", "choose route = \"dynamic\" or \"group_block\"");
        return all_resident(n, cfg.route == Route::resident ? ResidentWhy::route_resident : ResidentWhy::route_component, b.resident_total);
    }
    if (cfg.slots < 2)
        throw UsageError("slots = " + std::to_string(cfg.slots) + ": streaming needs at least 2 slots (prefetch depth = slots - 1); set slots >= 2");
    if (cfg.route == Route::dynamic) {
        if (device_cap && *device_cap >= b.resident_total && (!cfg.resident_budget || *cfg.resident_budget >= b.resident_total))
            return all_resident(n, ResidentWhy::whole_fits, b.resident_total);
        return select_residents(layout, cfg, b, device_cap, notes);
    }
    Residents r;
    r.why.assign(n, ResidentWhy::route_streams);
    r.streamed.resize(n);
    std::iota(r.streamed.begin(), r.streamed.end(), 0);
    if (cfg.route == Route::group_leaf && layout.granularity() != Granularity::leaf)
        notes.push_back("route group_leaf with layout granularity " + std::string(to_string(layout.granularity())) + " (leaf expected)");
    if (cfg.route == Route::group_block && layout.granularity() != Granularity::block)
        notes.push_back("route group_block with layout granularity " + std::string(to_string(layout.granularity())) + " (block expected)");
    return r;
}

struct Slots {
    std::uint32_t count = 0;           // Plan::slots
    std::uint32_t prefetch_depth = 0;  // Plan::prefetch_depth
    std::uint64_t bytes = 0;           // Plan::slot_bytes: the largest streamed group
};

// Step 3, slots: how many slots of what size the streamed groups rotate through, and how far ahead they upload.
// Throws when the device capacity cannot hold them beside the residents.
Slots size_slots(const EngineConfig & cfg, const Capacities & caps, const GroupBytes & b, const Residents & residents,
                 std::optional<std::uint64_t> device_cap, std::vector<std::string> & notes) {
    const std::string route_name(to_string(cfg.route));
    Slots s;
    for (auto i : residents.streamed) s.bytes = std::max(s.bytes, b.layout[i]);
    s.count = cfg.route == Route::group_block || cfg.route == Route::group_leaf ? 2 : cfg.slots;
    if (s.count != cfg.slots) notes.push_back("route " + route_name + ": 2 slots (one group ahead), slots = " + std::to_string(cfg.slots) + " ignored");
    s.prefetch_depth = s.count - 1;
    if (cfg.prefetch_depth && *cfg.prefetch_depth < s.prefetch_depth) {
        s.prefetch_depth = *cfg.prefetch_depth;
        notes.push_back("prefetch depth " + std::to_string(s.prefetch_depth) + " (of " + std::to_string(s.count - 1) + " the slots allow)" +
                        (s.prefetch_depth == 0 ? ": each streamed group is uploaded when it is acquired" : ""));
    }
    if (device_cap && residents.bytes + s.bytes * s.count > *device_cap)
        refuse_capacity(cfg, caps,
                        "device capacity " + format_mib(*device_cap) + " cannot hold " + std::to_string(s.count) + " slots of " + format_mib(s.bytes) +
                            (residents.bytes ? " plus " + format_mib(residents.bytes) + " of residents" : std::string()),
                        "raise device_budget, lower slots, or use a finer granularity (half | leaf)",
                        "lower slots, or use a finer granularity (half | leaf)");
    return s;
}

// Where step 4 put a streamed group's source, and why; step 5 words it.
enum class CopyWhy { disk_route, ram_unknown, pinned_all, pinned_budget, pageable, host_exhausted };

Residency residency_of(CopyWhy why) {
    switch (why) {
        case CopyWhy::pinned_all:
        case CopyWhy::pinned_budget: return Residency::pinned;
        case CopyWhy::pageable: return Residency::pageable;
        case CopyWhy::disk_route:
        case CopyWhy::ram_unknown:
        case CopyWhy::host_exhausted: break;
    }
    return Residency::file;
}

struct HostCopies {
    std::vector<CopyWhy> why;           // per group; read for the streamed ones only
    std::uint64_t host_cap = 0;         // usable RAM minus headroom
    std::uint64_t pin_budget = 0;       // pinned budget, capped by host_cap
    std::uint64_t candidates = 0;       // layout bytes of the streamed groups
    bool snapped_to_full = false;       // Plan::pin_snapped_to_full
    std::uint32_t staging_slots = 0;    // Plan::staging_slots: nonzero when a group streams from the file
};

// The host capacity for host copies: usable RAM minus headroom, nullopt when RAM is unknown. Notes either.
std::optional<std::uint64_t> host_capacity(const EngineConfig & cfg, const Capacities & caps, std::vector<std::string> & notes) {
    const auto usable = caps.usable_host_ram();
    if (!usable) {
        notes.push_back("host RAM unknown (" + (caps.cgroup_reason.empty() ? std::string("MemAvailable unreadable") : caps.cgroup_reason) +
                        "): host copies refused, streamed from the checkpoint file");
        return std::nullopt;
    }
    const std::uint64_t host_cap = *usable > cfg.ram_headroom ? *usable - cfg.ram_headroom : 0;
    notes.push_back("host capacity " + format_mib(host_cap) + " = usable RAM " + format_mib(*usable) + " - headroom " + format_mib(cfg.ram_headroom));
    if (caps.overcommit_mode && *caps.overcommit_mode == 2)
        notes.push_back("overcommit_memory = 2 (strict): host copies count against the commit limit");
    return host_cap;
}

// Step 4, host copies: each streamed group's source: pinned within the pin budget, pageable within RAM, else the file
// (always the file on route disk or with host RAM unknown). Notes the host capacity and a capped pin budget.
HostCopies place_host_copies(const EngineConfig & cfg, const Capacities & caps, const GroupBytes & b, const std::vector<std::size_t> & streamed,
                             std::vector<std::string> & notes) {
    HostCopies h;
    h.why.assign(b.layout.size(), CopyWhy::pageable);
    const auto all_from_file = [&](CopyWhy why) {
        for (auto i : streamed) h.why[i] = why;
        h.staging_slots = std::max<std::uint32_t>(1, cfg.staging_slots);
        return h;
    };
    if (cfg.route == Route::disk) return all_from_file(CopyWhy::disk_route);
    const auto host_cap = host_capacity(cfg, caps, notes);
    if (!host_cap) return all_from_file(CopyWhy::ram_unknown);
    h.host_cap = *host_cap;
    h.pin_budget = cfg.pinned_budget ? *cfg.pinned_budget : h.host_cap;
    if (h.pin_budget > h.host_cap) {
        notes.push_back("pinned budget " + format_mib(h.pin_budget) + " capped by host capacity " + format_mib(h.host_cap));
        h.pin_budget = h.host_cap;
    }
    for (auto i : streamed) h.candidates += b.layout[i];
    std::vector<bool> pinned(b.layout.size(), false);
    std::uint64_t host_used = 0;
    const bool snap = h.candidates > 0 && h.pin_budget > 0 &&
                      static_cast<double>(h.pin_budget) >= cfg.snap_to_full_pin * static_cast<double>(h.candidates) && h.host_cap >= h.candidates;
    if (snap) {
        h.snapped_to_full = h.pin_budget < h.candidates;
        for (auto i : streamed) pinned[i] = true;
        host_used = h.candidates;
    } else if (h.pin_budget > 0) {
        for (auto i : policy_order(streamed, b.layout, cfg.policy, h.pin_budget))
            if (host_used + b.layout[i] <= h.pin_budget) { pinned[i] = true; host_used += b.layout[i]; }
    }
    for (auto i : streamed) {
        if (pinned[i]) {
            h.why[i] = snap ? CopyWhy::pinned_all : CopyWhy::pinned_budget;
        } else if (host_used + b.layout[i] <= h.host_cap) {
            h.why[i] = CopyWhy::pageable;
            host_used += b.layout[i];
        } else {
            h.why[i] = CopyWhy::host_exhausted;
            h.staging_slots = std::max<std::uint32_t>(1, cfg.staging_slots);
        }
    }
    return h;
}

std::string resident_reason(ResidentWhy why, const EngineConfig & cfg, const Residents & r, std::uint64_t resident_total,
                            std::optional<std::uint64_t> device_cap) {
    const std::string policy(to_string(cfg.policy));
    switch (why) {
        case ResidentWhy::route_resident: return "route resident: uploaded once, kept on the device for the engine's life";
        case ResidentWhy::route_component: return "route component: uploaded at phase begin, freed at phase end";
        case ResidentWhy::whole_fits:
            return "resident: the whole component (" + format_mib(resident_total) + ") fits the device capacity " + format_mib(device_cap.value_or(0));
        case ResidentWhy::selected: return "resident: selected by policy " + policy + " within the " + r.budget_note;
        case ResidentWhy::first:
            return "resident first, before policy " + policy + ": the step cache runs it on every step (Note [Step "
                   "caching]), within the " + r.budget_note;
        case ResidentWhy::over_budget:
            return r.budget == 0 ? "streamed: " + r.budget_note : "streamed: does not fit the rest of the " + r.budget_note + " (policy " + policy + ")";
        case ResidentWhy::route_streams: break;
    }
    return "streamed: route " + std::string(to_string(cfg.route)) + " keeps no residents";
}

// A streamed group's reason: step 2's, then where its host copy lives (a file source on route disk or with host RAM
// unknown replaces step 2's).
std::string streamed_reason(std::string resident_part, CopyWhy why, const EngineConfig & cfg, const HostCopies & h, std::uint64_t slot_bytes) {
    switch (why) {
        case CopyWhy::disk_route:
            return "streamed from the checkpoint file (route disk, read_mode " + std::string(store::to_string(cfg.read_mode)) +
                   ") into its slot: through " + std::to_string(h.staging_slots) + " staging buffers of " + format_mib(slot_bytes) +
                   " on CUDA, straight into the slot on a host transport (counters.staging_bytes says which ran)";
        case CopyWhy::ram_unknown: return "streamed from the file: host RAM unknown, host copies refused";
        case CopyWhy::pinned_all:
            return resident_part + (h.snapped_to_full ? "; pinned: budget " + format_mib(h.pin_budget) + " >= " +
                                                            std::to_string(static_cast<int>(cfg.snap_to_full_pin * 100)) + " % of " +
                                                            format_mib(h.candidates) + ", snapped to full pinning"
                                                      : "; pinned: the pinned budget " + format_mib(h.pin_budget) + " holds every streamed group (" +
                                                            format_mib(h.candidates) + ")");
        case CopyWhy::pinned_budget:
            return resident_part + "; pinned: within the pinned budget " + format_mib(h.pin_budget) + " (policy " + std::string(to_string(cfg.policy)) + ")";
        case CopyWhy::pageable:
            return resident_part + (h.pin_budget == 0 ? "; pageable: pinned budget is 0" : "; pageable: outside the pinned budget " + format_mib(h.pin_budget));
        case CopyWhy::host_exhausted: break;
    }
    return resident_part + "; from the file: host capacity " + format_mib(h.host_cap) + " exhausted";
}

// Step 5, reasons: one decision per group, with its residency and the reason steps 2 and 4 give for it.
std::vector<GroupDecision> group_decisions(const ModelLayout & layout, const EngineConfig & cfg, const GroupBytes & b,
                                           std::optional<std::uint64_t> device_cap, const Residents & r, const Slots & s, const HostCopies & h) {
    std::vector<GroupDecision> groups;
    std::vector<bool> streamed(layout.size(), false);
    for (auto i : r.streamed) streamed[i] = true;
    for (std::size_t i = 0; i < layout.size(); ++i) {
        std::string reason = resident_reason(r.why[i], cfg, r, b.resident_total, device_cap);
        if (!streamed[i]) {
            groups.push_back(GroupDecision{i, layout.group(i).name, b.layout[i], Residency::resident, std::move(reason)});
            continue;
        }
        reason = streamed_reason(std::move(reason), h.why[i], cfg, h, s.bytes);
        groups.push_back(GroupDecision{i, layout.group(i).name, b.layout[i], residency_of(h.why[i]), std::move(reason)});
    }
    return groups;
}

}  // namespace

Plan plan_residency(const ModelLayout & layout, const EngineConfig & cfg, const Capacities & caps) {
    Plan p;
    p.route = cfg.route;
    p.read_mode = cfg.read_mode;
    const GroupBytes bytes = group_bytes(layout, cfg);
    const std::optional<std::uint64_t> device_cap = device_capacity(cfg, caps, p.notes);
    const Residents residents = choose_residents(layout, cfg, caps, bytes, device_cap, p.notes);
    Slots slots;
    HostCopies copies;
    if (!residents.streamed.empty()) {
        slots = size_slots(cfg, caps, bytes, residents, device_cap, p.notes);
        copies = place_host_copies(cfg, caps, bytes, residents.streamed, p.notes);
    }
    p.groups = group_decisions(layout, cfg, bytes, device_cap, residents, slots, copies);
    p.slots = slots.count;
    p.prefetch_depth = slots.prefetch_depth;
    p.slot_bytes = slots.bytes;
    p.staging_slots = copies.staging_slots;
    p.pin_snapped_to_full = copies.snapped_to_full;
    p.resident_bytes = residents.bytes;
    for (const auto & g : p.groups) {
        if (g.residency == Residency::pinned) p.pinned_bytes += g.bytes;
        else if (g.residency == Residency::pageable) p.pageable_bytes += g.bytes;
        else if (g.residency == Residency::file) p.file_bytes += g.bytes;
    }
    return p;
}

}  // namespace ddo::engine
