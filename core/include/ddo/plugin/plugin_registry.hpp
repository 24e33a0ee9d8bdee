// PluginRegistry: discovers plugin directories (each with an artifacts.toml), verifies artifacts
// (SHA-256 from an O_NOFOLLOW descriptor), and loads them through that same descriptor.
// Order of checks and the refusal classes: docs/architecture.md, "Artifact manifest, verification
// and loading order". INTERFACE FIXED BY THE SKELETON; implementation: core/src/plugin/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/ddo_model_plugin.h"

namespace ddo {

class PluginHostContext;  // ddo/plugin/plugin_host_api.hpp

// One [[artifact]] of a manifest.
struct ArtifactEntry {
    std::string name;
    std::string kind;          // "model" | "allocator"
    std::string file;          // relative to the manifest's directory
    std::uint64_t size = 0;
    std::string sha256;        // expected, lowercase hex
    std::string platform;      // e.g. "linux-x86_64"
    std::string fingerprint;   // expected build fingerprint
    std::filesystem::path manifest;  // the artifacts.toml it came from
    std::filesystem::path path;      // manifest dir / file
};

enum class PluginStatus { listed, verified, loaded, refused };

// Refusal classes (each one has a fixture plugin and a test asserting the exact reason).
enum class RefusalKind {
    none,
    digest_mismatch,
    no_manifest_entry,
    abi_major_mismatch,
    fingerprint_mismatch,
    missing_symbol,
    plugin_threw,
    duplicate_name,
    unsafe_file,       // symlink, not a regular file, group/world-writable, wrong owner
    open_failed,       // missing file, unreadable
    load_failed,       // dlopen error
    kind_mismatch,
    platform_mismatch,
};

const char * to_string(RefusalKind kind);

struct PluginRecord {
    ArtifactEntry artifact;
    std::string actual_sha256;       // empty until hashed
    std::string xxh3_128;            // fast content fingerprint for report identity
    PluginStatus status = PluginStatus::listed;
    RefusalKind refusal = RefusalKind::none;
    std::string refusal_reason;      // full message: file, expected vs found, next step
    // Once loaded: mapped from a sealed memfd copy of the bytes hashed (else from the file's descriptor, with the
    // reason), and what the copy cost.
    bool sealed = false;
    std::string seal_reason;
    double seal_s = 0;
    // Filled after negotiation:
    std::string name, version, kind, fingerprint;
    std::vector<std::string> aliases;
    std::uint32_t abi_major = 0, abi_minor = 0;
};

// A loaded plugin; the library is never unloaded (docs/architecture.md, Note [Plugin unloading]).
struct LoadedPlugin {
    PluginRecord record;
    const ddo_model_vtable * model = nullptr;          // kind == model
    const ddo_allocator_vtable * allocator = nullptr;  // kind == allocator
    // The host services this plugin was given (process lifetime): its last set_error message.
    PluginHostContext * host = nullptr;
};

class PluginRegistry {
public:
    // Reads every <dir>/artifacts.toml; loads nothing, hashes nothing. Missing directories are
    // skipped; a directory without a manifest yields records with RefusalKind::no_manifest_entry
    // for each *.so found in it.
    static PluginRegistry discover(const std::vector<std::filesystem::path> & dirs);

    const std::vector<PluginRecord> & records() const;

    // The directories discover() was given, in order (missing ones included).
    const std::vector<std::filesystem::path> & dirs() const;
    // Directories discover() skipped whole because they cannot be trusted (a group/world-writable directory on the
    // path, a foreign owner, a symlinked or writable manifest), each with the reason; also logged as a warning.
    const std::vector<std::pair<std::filesystem::path, std::string>> & skipped_dirs() const;

    // Hashes every listed artifact without loading any; returns true when all verify.
    bool verify_all();

    // Verifies, loads, negotiates and fetches the vtable. name: canonical name, else a unique alias.
    // Throws UsageError (unknown / ambiguous name, with the candidates) or VerificationError (any
    // refusal, with the message naming the file, what was expected and found, and the next step).
    const LoadedPlugin & load(std::string_view name_or_alias, std::string_view kind /* "model"|"allocator" */);

    // Verifies and negotiates every listed plugin (loads them) to fill names/versions/aliases for
    // `ddo-host plugins`; refusals are recorded, not thrown.
    void probe_all();

    PluginRegistry(PluginRegistry &&) noexcept;
    PluginRegistry & operator=(PluginRegistry &&) noexcept;
    ~PluginRegistry();

private:
    PluginRegistry();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo
