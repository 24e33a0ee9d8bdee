// The artifact manifest (artifacts.toml) of one plugin directory. Written by the build
// (cmake/write_manifest.cmake) or shipped with a drop-in plugin and reviewed by a maintainer.
// Format and rationale: docs/architecture.md, Note [Artifact manifest].
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "ddo/plugin/plugin_registry.hpp"

namespace ddo {

inline constexpr int kArtifactManifestSchemaVersion = 1;
inline constexpr const char * kArtifactManifestFileName = "artifacts.toml";

struct ArtifactManifest {
    std::filesystem::path file;  // the artifacts.toml that was read
    int schema_version = 0;
    std::vector<ArtifactEntry> artifacts;  // in file order; manifest and path filled
};

// Parses and validates one manifest: schema_version must be 1, every [[artifact]] has exactly the
// keys name, kind, file, size, sha256, platform, fingerprint; kind is model|allocator; sha256 is
// 64 hex digits; file is relative and stays inside the manifest's directory.
// Throws VerificationError naming file:line:column, what was expected and found, and the next step.
ArtifactManifest read_artifact_manifest(const std::filesystem::path & manifest_file);
// The same checks on the manifest's text in memory; manifest_file names it (and its directory anchors `file`).
ArtifactManifest parse_artifact_manifest(std::string_view toml_text, const std::filesystem::path & manifest_file);

// Writes `manifest` to manifest.file atomically (temp file + rename), in the format read_artifact_manifest
// reads, artifacts in the given order. Throws RuntimeError naming the file when it cannot be written.
void write_artifact_manifest(const ArtifactManifest & manifest);

// One [[artifact]] entry as the manifest writes it (for review before it is written).
std::string format_artifact_entry(const ArtifactEntry & entry);

}  // namespace ddo
