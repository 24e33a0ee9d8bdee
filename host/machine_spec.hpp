// The machine a run's memory forecast is held against (RunContext::machine; Note [Memory forecast] in
// docs/architecture.md): --machine NAME (a profile, presets/machines/NAME.toml), then --device-memory and
// --host-memory over it. Every error is a UsageError (exit 2) naming the flag or the file and the key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ddo/run_context.hpp"

namespace ddo::host {

// "8GiB", "7.5 GiB", "512MiB", "12GB" (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB): bytes. UsageError naming `flag`.
std::uint64_t parse_memory_size(const std::string & flag, const std::string & text);

// The profiles in `machines_dir` (their file stems), sorted.
std::vector<std::string> machine_profiles(const std::filesystem::path & machines_dir);

// A profile's keys: name (= its file stem), description, device_memory_gib, host_memory_gib (optional),
// link_gb_per_s; then the sizes given (empty: none). An unknown profile names the ones there are; an unknown key or a value out of range names the file.
MachineSpec resolve_machine(const std::string & profile, const std::string & device_memory,
                            const std::string & host_memory, const std::filesystem::path & machines_dir);

}  // namespace ddo::host
