// Point-in-time memory readings for the run report. Every reading is either a value or a reason;
// a reading that failed is never 0. /proc and /sys roots are parameters so tests can fake them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace ddo::report {

struct Reading {
    std::optional<std::uint64_t> bytes;
    std::string reason;  // why bytes is empty; empty when available
    static Reading of(std::uint64_t b) { return {b, {}}; }
    static Reading missing(std::string why) { return {std::nullopt, std::move(why)}; }
};

// VmRSS of <proc>/self/status (resident set: anonymous + file-backed + shmem).
Reading read_rss(const std::filesystem::path & proc_root);
// The same resident set from <proc>/self/statm (resident pages x page size): one short line, what the sampler reads
// at its interval (status is ~50 lines; smaps_rollup walks every mapping).
Reading read_rss_statm(const std::filesystem::path & proc_root);
// VmHWM of <proc>/self/status (the kernel's own RSS high-water mark).
Reading read_rss_hwm(const std::filesystem::path & proc_root);
// USS: Private_Clean + Private_Dirty of <proc>/self/smaps_rollup.
Reading read_uss(const std::filesystem::path & proc_root);
// MemAvailable / MemTotal of <proc>/meminfo.
Reading read_mem_available(const std::filesystem::path & proc_root);
Reading read_mem_total(const std::filesystem::path & proc_root);

// cgroup v2 of this process: <proc>/self/cgroup "0::/path" -> <sys>/fs/cgroup/path/memory.{max,current}.
struct CgroupReading {
    std::string path;      // cgroup directory, empty when unknown
    Reading limit;         // memory.max; "max" -> missing with reason "no limit (memory.max = max)"
    Reading usage;         // memory.current
};
CgroupReading read_cgroup(const std::filesystem::path & proc_root, const std::filesystem::path & sys_root);

// NVML loaded with dlopen at run time; absent library or driver -> readings with reasons.
class NvmlProbe {
public:
    explicit NvmlProbe(const std::string & library, unsigned device_index);
    ~NvmlProbe();
    NvmlProbe(const NvmlProbe &) = delete;
    NvmlProbe & operator=(const NvmlProbe &) = delete;

    bool available() const;
    const std::string & unavailable_reason() const;
    Reading used();    // device-wide used bytes (all processes + contexts)
    Reading total();
    std::optional<std::string> device_name() const;
    std::optional<std::string> driver_version() const;
    std::optional<std::string> cuda_driver_version() const;  // e.g. "13.0"

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::report
