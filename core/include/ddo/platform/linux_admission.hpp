// LinuxAdmission: what Linux will let this process grow by, read before any growth (seed 002:
// "Native Linux admission must preserve overcommit mode, physical/process bounds and finite cgroup
// limits. Unknown observations refuse growth."). Observations come from /proc/sys/vm/
// overcommit_memory, /proc/meminfo (CommitLimit, Committed_AS, MemAvailable), the memory cgroup of
// this process (v2 memory.max / memory.current, v1 memory.limit_in_bytes / memory.usage_in_bytes as
// fallback, the tightest ancestor wins), RLIMIT_MEMLOCK and RLIMIT_AS with /proc/self/status
// (VmLck, VmSize). The roots and the rlimit source are injectable so tests run on fake trees.
// Rules and the reasons they print: docs/architecture.md, Note [Linux admission].
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::platform {

// One observed quantity. Unknown carries the reason (file and error); unlimited means the kernel
// reports no bound (RLIM_INFINITY, memory.max "max", no memory cgroup limit).
struct Observation {
    enum class State { unknown, known, unlimited };
    State state = State::unknown;
    std::uint64_t value = 0;  // bytes, or the mode for overcommit_memory
    std::string source;       // the file or call it came from
    std::string error;        // why it is unknown

    static Observation known_value(std::uint64_t v, std::string source);
    static Observation unlimited_value(std::string source);
    static Observation unknown_value(std::string source, std::string error);
    bool is_known() const { return state == State::known; }
    bool is_unknown() const { return state == State::unknown; }
    nlohmann::json to_json() const;
};

struct LinuxObservations {
    Observation overcommit_mode;   // 0 heuristic, 1 always, 2 strict (CommitLimit enforced)
    Observation commit_limit;      // bytes
    Observation committed_as;      // bytes
    Observation mem_available;     // bytes
    std::string cgroup_version;    // "v2", "v1", "none" (no memory controller) or "unknown"
    std::string cgroup_path;       // the directory whose limit binds (tightest ancestor)
    Observation cgroup_memory_max;
    Observation cgroup_memory_current;
    Observation rlimit_memlock;    // soft limit, bytes
    Observation rlimit_as;         // soft limit, bytes
    Observation vm_locked;         // VmLck of this process, bytes
    Observation vm_size;           // VmSize of this process, bytes
    nlohmann::json to_json() const;
};

// Where the files are. Tests point these at a fake tree.
struct AdmissionRoots {
    std::filesystem::path proc = "/proc";
    std::filesystem::path sys = "/sys";
    // The roots a process observes: /proc and /sys, or <DIR>/proc and <DIR>/sys when DDO_ADMISSION_ROOT=DIR is set
    // (a faked tree for end-to-end tests of memory limits; docs/validation.md). Every observation's `source` names
    // the file it read, so a report shows which tree it saw.
    static AdmissionRoots of_process();
};

// Soft limit of an RLIMIT_* resource; nullopt means RLIM_INFINITY. Sets *error and returns nullopt
// with a non-empty error when the limit cannot be read.
using RlimitReader = std::function<std::optional<std::uint64_t>(int resource, std::string * error)>;

enum class GrowthKind {
    commit,  // host memory that counts against commit and the cgroup (pageable, CUDA-pinned)
    locked,  // host memory locked with mlock: also bounded by RLIMIT_MEMLOCK
};

// Which host staging route asks (seed 000: separate routes, separate limits). It picks the next step a
// refusal suggests: the refused route's own setting, never the other route's.
enum class GrowthRoute {
    unspecified,   // not a staging route (or unknown): the hint names both
    pinned,        // a pinned allocation: capacities.pinned_host_budget_gb / pin_host_memory
    registration,  // a registration of existing memory: capacities.host_registration (+ ceiling)
};

struct GrowthRequest {
    std::uint64_t bytes = 0;
    GrowthKind kind = GrowthKind::commit;
    std::uint64_t headroom = 0;  // bytes that must stay available after the growth (RAM headroom)
    std::string what;            // e.g. "pinned staging slot 2", for the reason
    GrowthRoute route = GrowthRoute::unspecified;
};

// The preset step that asks the given route for less page-locked memory, e.g. for pinned: "lower
// capacities.pinned_host_budget_gb or set capacities.pin_host_memory = false".
std::string lower_locked_hint(GrowthRoute route);

struct AdmissionDecision {
    bool admitted = false;
    std::string reason;               // on refusal: which observation or limit, and the next step
    std::vector<std::string> checks;  // every rule evaluated, in order, with its numbers
    nlohmann::json to_json() const;
};

class LinuxAdmission {
public:
    explicit LinuxAdmission(AdmissionRoots roots = AdmissionRoots::of_process(), RlimitReader rlimits = {});

    // Reads every observation now; never throws for a missing or unreadable file.
    LinuxObservations observe() const;
    // observe() + decide().
    AdmissionDecision admit(const GrowthRequest & request) const;
    // The rules, on given observations (pure).
    static AdmissionDecision decide(const LinuxObservations & obs, const GrowthRequest & request);

private:
    AdmissionRoots roots_;
    RlimitReader rlimits_;
};

}  // namespace ddo::platform
