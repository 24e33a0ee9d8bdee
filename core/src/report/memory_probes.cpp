#include "ddo/report/memory_probes.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string_view>

namespace ddo::report {

namespace fs = std::filesystem;

namespace {

// "Key:   1234 kB" lines; returns bytes.
Reading read_kb_field(const fs::path & file, std::string_view key) {
    std::ifstream in(file);
    if (!in) return Reading::missing("cannot read " + file.string());
    std::string line;
    while (std::getline(in, line)) {
        if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':') {
            std::istringstream ss(line.substr(key.size() + 1));
            std::uint64_t kb = 0;
            if (ss >> kb) return Reading::of(kb * 1024);
            return Reading::missing("unparsable '" + std::string(key) + "' in " + file.string());
        }
    }
    return Reading::missing("no '" + std::string(key) + "' in " + file.string());
}

std::optional<std::string> read_first_line(const fs::path & file) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    std::string line;
    std::getline(in, line);
    return line;
}

}  // namespace

Reading read_rss(const fs::path & proc_root) { return read_kb_field(proc_root / "self/status", "VmRSS"); }
Reading read_rss_statm(const fs::path & proc_root) {
    const auto file = proc_root / "self/statm";
    std::ifstream in(file);
    if (!in) return Reading::missing("cannot read " + file.string());
    std::uint64_t size = 0, resident = 0;
    if (!(in >> size >> resident)) return Reading::missing("unparsable " + file.string());
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page <= 0) return Reading::missing("sysconf(_SC_PAGESIZE) failed");
    return Reading::of(resident * std::uint64_t(page));
}

Reading read_rss_hwm(const fs::path & proc_root) { return read_kb_field(proc_root / "self/status", "VmHWM"); }

Reading read_uss(const fs::path & proc_root) {
    auto file = proc_root / "self/smaps_rollup";
    auto clean = read_kb_field(file, "Private_Clean");
    if (!clean.bytes) return clean;
    auto dirty = read_kb_field(file, "Private_Dirty");
    if (!dirty.bytes) return dirty;
    return Reading::of(*clean.bytes + *dirty.bytes);
}

Reading read_mem_available(const fs::path & proc_root) { return read_kb_field(proc_root / "meminfo", "MemAvailable"); }
Reading read_mem_total(const fs::path & proc_root) { return read_kb_field(proc_root / "meminfo", "MemTotal"); }

CgroupReading read_cgroup(const fs::path & proc_root, const fs::path & sys_root) {
    CgroupReading r;
    std::ifstream in(proc_root / "self/cgroup");
    if (!in) {
        r.limit = r.usage = Reading::missing("cannot read " + (proc_root / "self/cgroup").string());
        return r;
    }
    std::string line, rel;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0) rel = line.substr(3);
    if (rel.empty()) {
        r.limit = r.usage = Reading::missing("no cgroup v2 entry ('0::') in " + (proc_root / "self/cgroup").string());
        return r;
    }
    fs::path dir = sys_root / "fs/cgroup" / fs::path(rel).relative_path();
    r.path = dir.string();
    auto max = read_first_line(dir / "memory.max");
    if (!max) {
        r.limit = Reading::missing("cannot read " + (dir / "memory.max").string());
    } else if (*max == "max") {
        r.limit = Reading::missing("no limit (memory.max = max)");
    } else {
        try {
            r.limit = Reading::of(std::stoull(*max));
        } catch (...) {
            r.limit = Reading::missing("unparsable memory.max '" + *max + "'");
        }
    }
    auto cur = read_first_line(dir / "memory.current");
    if (!cur) {
        r.usage = Reading::missing("cannot read " + (dir / "memory.current").string());
    } else {
        try {
            r.usage = Reading::of(std::stoull(*cur));
        } catch (...) {
            r.usage = Reading::missing("unparsable memory.current '" + *cur + "'");
        }
    }
    return r;
}

}  // namespace ddo::report
