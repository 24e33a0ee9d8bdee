// What a media writer hands back: the output's path and the SHA-256 of the bytes it wrote (hashed from the temp file
// before the rename, so the report names what was written, not what a later reader finds), and whether a writer may
// replace an existing file. Same discipline as the PNG output (core/model/src/image_output.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ddo::media {

// refuse: an existing file at the path is an error (UsageError) and is left untouched; replace: renamed over.
enum class Overwrite { refuse, replace };

struct WrittenFile {
    std::filesystem::path path;
    std::string sha256;      // lowercase hex of the bytes written
    std::uint64_t size = 0;  // bytes
};

}  // namespace ddo::media
