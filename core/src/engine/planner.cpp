// The residency planner (ddo/engine/planner.hpp). Policies and the snap-to-full rule follow the DDO
// anchor's balanced planner (research/ddo-anchor.md §4.4); unknown observations refuse growth.
#include "ddo/engine/planner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

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

Plan plan_residency(const ModelLayout & layout, const EngineConfig & cfg, const Capacities & caps) {
    Plan p;
    p.route = cfg.route;
    p.read_mode = cfg.read_mode;
    const std::size_t n = layout.size();
    std::vector<std::uint64_t> bytes(n);
    for (std::size_t i = 0; i < n; ++i) {
        bytes[i] = layout.group(i).bytes;
        p.groups.push_back(GroupDecision{i, layout.group(i).name, bytes[i], Residency::pageable, {}});
    }
    if (!cfg.resident_bytes.empty() && cfg.resident_bytes.size() != n)
        throw UsageError("planner: resident_bytes lists " + std::to_string(cfg.resident_bytes.size()) + " groups, the layout has " +
                         std::to_string(n));
    // What a group occupies when resident (its layout bytes unless the caller converts it once).
    const std::vector<std::uint64_t> rbytes = cfg.resident_bytes.empty() ? bytes : cfg.resident_bytes;
    const std::uint64_t total = std::accumulate(rbytes.begin(), rbytes.end(), std::uint64_t(0));
    const std::string route_name(to_string(cfg.route));

    // Device capacity: explicit budget, else observed free memory minus headroom, else unknown.
    std::optional<std::uint64_t> device_cap;
    if (cfg.device_budget) {
        device_cap = cfg.device_budget;
        p.notes.push_back("device capacity " + format_mib(*device_cap) + " from device_budget");
    } else if (caps.device_free) {
        device_cap = *caps.device_free > cfg.device_headroom ? *caps.device_free - cfg.device_headroom : 0;
        p.notes.push_back("device capacity " + format_mib(*device_cap) + " = observed free " + format_mib(*caps.device_free) +
                          " - headroom " + format_mib(cfg.device_headroom));
    } else {
        p.notes.push_back("device capacity unknown (no device_budget, device free memory not observed): no residents beyond what the route requires");
    }

    // A capacity the environment sets (observed free memory; on the CPU transport the host's, bounded by the process's
    // memory cgroup) that cannot hold what the route needs is a runtime failure (exit 4) naming what was observed; a
    // device_budget that cannot is the preset's (exit 2).
    // what: what does not fit; budget_step / observed_step: the next step for each case.
    const auto cannot_hold = [&](const std::string & what, const std::string & budget_step, const std::string & observed_step) {
        if (cfg.device_budget) throw UsageError(what + "; " + budget_step);
        throw RuntimeError(what + " (" + (caps.device_source.empty() ? "observed free device memory " + format_mib(caps.device_free.value_or(0))
                                                                     : caps.device_source) +
                           ", minus headroom " + format_mib(cfg.device_headroom) + "); " + observed_step +
                           (caps.device_source.empty() ? "" : ", or give the process more memory (a larger memory cgroup limit)"));
    };
    auto all_resident = [&](const std::string & reason) {
        if (device_cap && total > *device_cap)
            cannot_hold("route " + route_name + " keeps the whole component (" + format_mib(total) + ") on the device, but the device capacity is " +
                            format_mib(*device_cap),
                        "choose route = \"dynamic\" or \"group_block\", or raise device_budget", "choose route = \"dynamic\" or \"group_block\"");
        for (auto & g : p.groups) { g.residency = Residency::resident; g.reason = reason; }
        p.resident_bytes = total;
        return p;
    };
    if (cfg.route == Route::resident)
        return all_resident("route resident: uploaded once, kept on the device for the engine's life");
    if (cfg.route == Route::component)
        return all_resident("route component: uploaded at phase begin, freed at phase end");

    if (cfg.slots < 2)
        throw UsageError("slots = " + std::to_string(cfg.slots) + ": streaming needs at least 2 slots (prefetch depth = slots - 1); set slots >= 2");

    std::vector<std::size_t> streamed;
    if (cfg.route == Route::dynamic) {
        if (device_cap && *device_cap >= total && (!cfg.resident_budget || *cfg.resident_budget >= total)) {
            for (auto & g : p.groups) {
                g.residency = Residency::resident;
                g.reason = "resident: the whole component (" + format_mib(total) + ") fits the device capacity " + format_mib(*device_cap);
            }
            p.resident_bytes = total;
            return p;
        }
        const std::uint64_t largest = layout.largest_group_bytes();
        const std::uint64_t slot_cost = largest * cfg.slots;
        std::uint64_t budget = 0;
        std::string why;
        if (!device_cap) {
            why = "device capacity unknown: resident growth refused";
        } else {
            const std::uint64_t cap = *device_cap > slot_cost ? *device_cap - slot_cost : 0;
            if (cfg.resident_budget) {
                budget = std::min(*cfg.resident_budget, cap);
                why = "resident budget " + format_mib(budget) + (budget < *cfg.resident_budget ? " (resident_budget " + format_mib(*cfg.resident_budget) +
                      " capped by device capacity " + format_mib(*device_cap) + " - " + std::to_string(cfg.slots) + " slots x " + format_mib(largest) + ")" : " from resident_budget");
            } else {
                budget = cap;
                why = "resident budget " + format_mib(budget) + " = device capacity " + format_mib(*device_cap) + " - " + std::to_string(cfg.slots) +
                      " slots x " + format_mib(largest);
            }
        }
        p.notes.push_back(why);
        std::vector<std::size_t> all(n);
        std::iota(all.begin(), all.end(), 0);
        std::uint64_t used = 0;
        std::vector<bool> res(n, false);
        if (budget > 0)
            for (auto i : policy_order(all, rbytes, cfg.policy, budget))
                if (used + rbytes[i] <= budget) { res[i] = true; used += rbytes[i]; }
        for (std::size_t i = 0; i < n; ++i) {
            if (res[i]) {
                p.groups[i].residency = Residency::resident;
                p.groups[i].reason = "resident: selected by policy " + std::string(to_string(cfg.policy)) + " within the " + why;
                p.resident_bytes += rbytes[i];
            } else {
                streamed.push_back(i);
                p.groups[i].reason = budget == 0 ? "streamed: " + why : "streamed: does not fit the rest of the " + why + " (policy " + std::string(to_string(cfg.policy)) + ")";
            }
        }
    } else {
        for (std::size_t i = 0; i < n; ++i) {
            streamed.push_back(i);
            p.groups[i].reason = "streamed: route " + route_name + " keeps no residents";
        }
        if (cfg.route == Route::group_leaf && layout.granularity() != Granularity::leaf)
            p.notes.push_back("route group_leaf with layout granularity " + std::string(to_string(layout.granularity())) + " (leaf expected)");
        if (cfg.route == Route::group_block && layout.granularity() != Granularity::block)
            p.notes.push_back("route group_block with layout granularity " + std::string(to_string(layout.granularity())) + " (block expected)");
    }
    if (streamed.empty()) return p;

    std::uint64_t slot_bytes = 0, candidates = 0;
    for (auto i : streamed) { slot_bytes = std::max(slot_bytes, bytes[i]); candidates += bytes[i]; }
    p.slots = cfg.route == Route::group_block || cfg.route == Route::group_leaf ? 2 : cfg.slots;
    if (p.slots != cfg.slots) p.notes.push_back("route " + route_name + ": 2 slots (one group ahead), slots = " + std::to_string(cfg.slots) + " ignored");
    p.prefetch_depth = p.slots - 1;
    if (cfg.prefetch_depth && *cfg.prefetch_depth < p.prefetch_depth) {
        p.prefetch_depth = *cfg.prefetch_depth;
        p.notes.push_back("prefetch depth " + std::to_string(p.prefetch_depth) + " (of " + std::to_string(p.slots - 1) +
                          " the slots allow)" + (p.prefetch_depth == 0 ? ": each streamed group is uploaded when it is acquired" : ""));
    }
    p.slot_bytes = slot_bytes;
    if (device_cap && p.resident_bytes + slot_bytes * p.slots > *device_cap)
        cannot_hold("device capacity " + format_mib(*device_cap) + " cannot hold " + std::to_string(p.slots) + " slots of " + format_mib(slot_bytes) +
                        (p.resident_bytes ? " plus " + format_mib(p.resident_bytes) + " of residents" : std::string()),
                    "raise device_budget, lower slots, or use a finer granularity (half | leaf)",
                    "lower slots, or use a finer granularity (half | leaf)");

    if (cfg.route == Route::disk) {
        p.staging_slots = std::max<std::uint32_t>(1, cfg.staging_slots);
        for (auto i : streamed) {
            p.groups[i].residency = Residency::file;
            p.groups[i].reason = "streamed from the checkpoint file (route disk, read_mode " + std::string(store::to_string(cfg.read_mode)) +
                                 ") into its slot: through " + std::to_string(p.staging_slots) + " staging buffers of " + format_mib(slot_bytes) +
                                 " on CUDA, straight into the slot on a host transport (counters.staging_bytes says which ran)";
            p.file_bytes += bytes[i];
        }
        return p;
    }

    // Host copies of the streamed groups: pinned within the pin budget, pageable within RAM, else file.
    const auto usable = caps.usable_host_ram();
    if (!usable) {
        p.staging_slots = std::max<std::uint32_t>(1, cfg.staging_slots);
        p.notes.push_back("host RAM unknown (" + (caps.cgroup_reason.empty() ? std::string("MemAvailable unreadable") : caps.cgroup_reason) +
                          "): host copies refused, streamed from the checkpoint file");
        for (auto i : streamed) {
            p.groups[i].residency = Residency::file;
            p.groups[i].reason = "streamed from the file: host RAM unknown, host copies refused";
            p.file_bytes += bytes[i];
        }
        return p;
    }
    const std::uint64_t host_cap = *usable > cfg.ram_headroom ? *usable - cfg.ram_headroom : 0;
    p.notes.push_back("host capacity " + format_mib(host_cap) + " = usable RAM " + format_mib(*usable) + " - headroom " + format_mib(cfg.ram_headroom));
    if (caps.overcommit_mode && *caps.overcommit_mode == 2)
        p.notes.push_back("overcommit_memory = 2 (strict): host copies count against the commit limit");
    std::uint64_t pin_budget = cfg.pinned_budget ? *cfg.pinned_budget : host_cap;
    if (pin_budget > host_cap) {
        p.notes.push_back("pinned budget " + format_mib(pin_budget) + " capped by host capacity " + format_mib(host_cap));
        pin_budget = host_cap;
    }
    std::vector<Residency> src(n, Residency::pageable);
    std::uint64_t pinned = 0;
    const bool snap = candidates > 0 && pin_budget > 0 && static_cast<double>(pin_budget) >= cfg.snap_to_full_pin * static_cast<double>(candidates) &&
                      host_cap >= candidates;
    if (snap) {
        p.pin_snapped_to_full = pin_budget < candidates;
        for (auto i : streamed) {
            src[i] = Residency::pinned;
            p.groups[i].reason += p.pin_snapped_to_full
                ? "; pinned: budget " + format_mib(pin_budget) + " >= " + std::to_string(static_cast<int>(cfg.snap_to_full_pin * 100)) + " % of " + format_mib(candidates) + ", snapped to full pinning"
                : "; pinned: the pinned budget " + format_mib(pin_budget) + " holds every streamed group (" + format_mib(candidates) + ")";
        }
        pinned = candidates;
    } else if (pin_budget > 0) {
        for (auto i : policy_order(streamed, bytes, cfg.policy, pin_budget))
            if (pinned + bytes[i] <= pin_budget) { src[i] = Residency::pinned; pinned += bytes[i]; }
    }
    std::uint64_t host_used = pinned;
    for (auto i : streamed) {
        auto & g = p.groups[i];
        if (src[i] == Residency::pinned) {
            if (!snap) g.reason += "; pinned: within the pinned budget " + format_mib(pin_budget) + " (policy " + std::string(to_string(cfg.policy)) + ")";
            g.residency = Residency::pinned;
            p.pinned_bytes += bytes[i];
        } else if (host_used + bytes[i] <= host_cap) {
            g.residency = Residency::pageable;
            g.reason += pin_budget == 0 ? "; pageable: pinned budget is 0" : "; pageable: outside the pinned budget " + format_mib(pin_budget);
            host_used += bytes[i];
            p.pageable_bytes += bytes[i];
        } else {
            g.residency = Residency::file;
            g.reason += "; from the file: host capacity " + format_mib(host_cap) + " exhausted";
            p.file_bytes += bytes[i];
        }
    }
    if (p.file_bytes > 0) p.staging_slots = std::max<std::uint32_t>(1, cfg.staging_slots);
    return p;
}

}  // namespace ddo::engine
