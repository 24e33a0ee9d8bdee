// SHA-256 of a file's bytes for report identity (preset files, outputs). Artifacts are hashed by the
// plugin registry from the verified descriptor; this is only for files the report names.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ddo::report {

// Lowercase hex digest, or nullopt when the file cannot be read.
std::optional<std::string> file_sha256(const std::filesystem::path & path);

}  // namespace ddo::report
