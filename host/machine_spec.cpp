#include "machine_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <toml++/toml.h>

#include "ddo/error.hpp"

namespace ddo::host {

namespace fs = std::filesystem;

std::uint64_t parse_memory_size(const std::string & flag, const std::string & text) {
    static const std::map<std::string, double> units = {
        {"b", 1.0},          {"kib", 1024.0}, {"mib", 1024.0 * 1024}, {"gib", 1024.0 * 1024 * 1024},
        {"tib", 1024.0 * 1024 * 1024 * 1024}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
    const auto bad = [&](const std::string & why) {
        return UsageError(flag + " '" + text + "': " + why + "; give a size with its unit, e.g. " + flag + " 8GiB (or 512MiB, 12GB)");
    };
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception &) {
        throw bad("no number");
    }
    std::string unit;
    for (std::size_t i = used; i < text.size(); ++i)
        if (!std::isspace(static_cast<unsigned char>(text[i]))) unit += char(std::tolower(static_cast<unsigned char>(text[i])));
    if (unit.empty()) throw bad("no unit");
    const auto it = units.find(unit);
    if (it == units.end()) throw bad("unknown unit '" + unit + "'");
    if (!std::isfinite(v) || v <= 0) throw bad("not a positive size");
    return std::uint64_t(v * it->second);
}

std::vector<std::string> machine_profiles(const fs::path & dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".toml") out.push_back(e.path().stem().string());
    std::sort(out.begin(), out.end());
    return out;
}

namespace {

void read_profile(MachineSpec & m, const std::string & profile, const fs::path & dir) {
    const fs::path file = dir / (profile + ".toml");
    if (!fs::is_regular_file(file)) {
        std::string have;
        for (const auto & p : machine_profiles(dir)) have += (have.empty() ? "" : ", ") + p;
        throw UsageError("--machine " + profile + ": no profile " + file.string() + " (profiles: " +
                         (have.empty() ? std::string("none in ") + dir.string() : have) +
                         "); or give --device-memory SIZE [--host-memory SIZE] yourself");
    }
    toml::table t;
    try {
        t = toml::parse_file(file.string());
    } catch (const toml::parse_error & e) {
        throw UsageError(file.string() + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()) +
                         "; fix the profile's TOML");
    }
    const auto where = [&](const std::string & key) { return file.string() + ": " + key; };
    for (const auto & [k, v] : t) {
        const std::string key(k.str());
        if (key != "name" && key != "description" && key != "device_memory_gib" && key != "host_memory_gib" &&
            key != "link_gb_per_s")
            throw UsageError(where(key) + ": unknown key; a machine profile has name, description, device_memory_gib, "
                                          "host_memory_gib and link_gb_per_s");
    }
    if (auto n = t["name"].value<std::string>(); !n || *n != profile)
        throw UsageError(where("name") + ": must be \"" + profile + "\" (the file's name)");
    const auto number = [&](const char * key, double lo, double hi) -> std::optional<double> {
        const auto node = t[key];
        if (!node) return std::nullopt;
        const auto v = node.value<double>();
        if (!v || !(*v > lo && *v <= hi))
            throw UsageError(where(key) + ": must be a number in (" + std::to_string(int(lo)) + ", " + std::to_string(int(hi)) + "]");
        return v;
    };
    const auto device = number("device_memory_gib", 0, 4096);
    if (!device) throw UsageError(where("device_memory_gib") + ": missing; a profile says how much device memory a run may use");
    m.name = profile;
    m.device_bytes = std::uint64_t(*device * 1024.0 * 1024 * 1024);
    m.device_source = file.string() + " device_memory_gib";
    if (const auto host = number("host_memory_gib", 0, 65536)) {
        m.host_bytes = std::uint64_t(*host * 1024.0 * 1024 * 1024);
        m.host_source = file.string() + " host_memory_gib";
    }
    if (const auto link = number("link_gb_per_s", 0, 10000)) {
        m.link_gb_per_s = *link;
        m.link_source = file.string() + " link_gb_per_s";
    }
}

}  // namespace

MachineSpec resolve_machine(const std::string & profile, const std::string & device_memory,
                            const std::string & host_memory, const fs::path & machines_dir) {
    MachineSpec m;
    if (!profile.empty()) read_profile(m, profile, machines_dir);
    if (!device_memory.empty()) {
        m.device_bytes = parse_memory_size("--device-memory", device_memory);
        m.device_source = "--device-memory " + device_memory;
    }
    if (!host_memory.empty()) {
        m.host_bytes = parse_memory_size("--host-memory", host_memory);
        m.host_source = "--host-memory " + host_memory;
    }
    return m;
}

}  // namespace ddo::host
