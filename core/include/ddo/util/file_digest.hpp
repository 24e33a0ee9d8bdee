// FileDigest: SHA-256 (trust, OpenSSL EVP) and XXH3-128 (fast content identity for reports and
// caches) of one file, computed in a single pass from an open descriptor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ddo {

struct FileDigest {
    std::string sha256;    // lowercase hex, 64 chars
    std::string xxh3_128;  // lowercase hex of the canonical (big-endian) form, 32 chars
    std::uint64_t size = 0;
};

// Reads the whole file behind fd from offset 0 with pread (the descriptor's offset is untouched).
// Throws ddo::RuntimeError naming path_for_messages when a read fails.
FileDigest digest_fd(int fd /* borrowed */, const std::filesystem::path & path_for_messages);
// The same, handing every chunk read to `sink` too (the bytes hashed, in order): the plugin loader copies them into a
// sealed memfd in the same pass. A sink returning false is not called again; the digest still completes.
FileDigest digest_fd(int fd /* borrowed */, const std::filesystem::path & path_for_messages,
                     const std::function<bool(const unsigned char * data, std::size_t size)> & sink);

// SHA-256 of bytes in memory (an output before it is written: the report hashes what was written, not what a
// later reader finds on disk).
std::string sha256_hex(const void * data, std::size_t size);
// SHA-256 of bytes given in pieces (a stream of frames hashed as they are written): the same digest as sha256_hex of
// the pieces concatenated.
class Sha256Stream {
public:
    Sha256Stream();
    ~Sha256Stream();
    Sha256Stream(const Sha256Stream &) = delete;
    Sha256Stream & operator=(const Sha256Stream &) = delete;
    void update(const void * data, std::size_t size);
    std::string hex();  // lowercase hex; the stream is done after this
private:
    void * ctx_;  // EVP_MD_CTX
};

// XXH3-128 of bytes in memory, lowercase hex of the canonical form (as FileDigest::xxh3_128).
std::string xxh3_128_hex(const void * data, std::size_t size);

// The first 12 hex digits, for listings ("sha256 3f2a9c0d1e4b").
std::string short_digest(std::string_view hex);

}  // namespace ddo

namespace ddo {

// SHA-256 of a named file for report identity (preset files, outputs): opens it read-only and
// digests it like digest_fd. nullopt when the file cannot be opened or read. Artifacts are never
// hashed this way: the plugin registry hashes the verified descriptor it then loads.
std::optional<std::string> file_sha256(const std::filesystem::path & path);

}  // namespace ddo
