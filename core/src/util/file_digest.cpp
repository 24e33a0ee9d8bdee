#include "ddo/util/file_digest.hpp"

#include <openssl/evp.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo {

namespace {

struct EvpMdCtxDeleter {
    void operator()(EVP_MD_CTX * ctx) const noexcept { EVP_MD_CTX_free(ctx); }
};
using EvpMdCtxPtr = std::unique_ptr<EVP_MD_CTX, EvpMdCtxDeleter>;

struct Xxh3StateDeleter {
    void operator()(XXH3_state_t * state) const noexcept { XXH3_freeState(state); }
};
using Xxh3StatePtr = std::unique_ptr<XXH3_state_t, Xxh3StateDeleter>;

// Large enough that hashing a 100 MB plugin is a few hundred syscalls, small enough for the heap.
constexpr std::size_t kReadChunk = 1u << 20;

std::string to_hex(const unsigned char * bytes, std::size_t n) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(2 * n, '0');
    for (std::size_t i = 0; i < n; ++i) {
        out[2 * i] = kDigits[bytes[i] >> 4];
        out[2 * i + 1] = kDigits[bytes[i] & 0xf];
    }
    return out;
}

[[noreturn]] void fail(const std::filesystem::path & path, const std::string & what) {
    throw RuntimeError("cannot hash '" + path.string() + "': " + what +
                       "; check that the file is readable and the disk is healthy");
}

}  // namespace

FileDigest digest_fd(int fd, const std::filesystem::path & path_for_messages) { return digest_fd(fd, path_for_messages, {}); }

FileDigest digest_fd(int fd, const std::filesystem::path & path_for_messages,
                     const std::function<bool(const unsigned char *, std::size_t)> & sink) {
    bool feed = static_cast<bool>(sink);
    EvpMdCtxPtr sha{EVP_MD_CTX_new()};
    Xxh3StatePtr xxh{XXH3_createState()};
    if (!sha || !xxh) fail(path_for_messages, "out of memory creating hash state");
    if (EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr) != 1) fail(path_for_messages, "EVP_DigestInit_ex failed");
    if (XXH3_128bits_reset(xxh.get()) != XXH_OK) fail(path_for_messages, "XXH3_128bits_reset failed");

    std::vector<unsigned char> buffer(kReadChunk);
    FileDigest digest;
    off_t offset = 0;
    for (;;) {
        ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail(path_for_messages, std::string("read failed: ") + std::strerror(errno));
        }
        if (n == 0) break;
        if (EVP_DigestUpdate(sha.get(), buffer.data(), static_cast<std::size_t>(n)) != 1)
            fail(path_for_messages, "EVP_DigestUpdate failed");
        if (XXH3_128bits_update(xxh.get(), buffer.data(), static_cast<std::size_t>(n)) != XXH_OK)
            fail(path_for_messages, "XXH3_128bits_update failed");
        if (feed) feed = sink(buffer.data(), static_cast<std::size_t>(n));
        offset += n;
    }
    digest.size = static_cast<std::uint64_t>(offset);

    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int md_len = 0;
    if (EVP_DigestFinal_ex(sha.get(), md.data(), &md_len) != 1) fail(path_for_messages, "EVP_DigestFinal_ex failed");
    digest.sha256 = to_hex(md.data(), md_len);

    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(xxh.get()));
    digest.xxh3_128 = to_hex(canonical.digest, sizeof(canonical.digest));
    return digest;
}

std::string short_digest(std::string_view hex) { return std::string(hex.substr(0, 12)); }

std::string xxh3_128_hex(const void * data, std::size_t size) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, size));
    return to_hex(canonical.digest, sizeof(canonical.digest));
}

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX *>(ctx_), EVP_sha256(), nullptr) != 1)
        throw RuntimeError("SHA-256 stream: EVP_DigestInit_ex failed");
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX *>(ctx_)); }

void Sha256Stream::update(const void * data, std::size_t size) {
    if (EVP_DigestUpdate(static_cast<EVP_MD_CTX *>(ctx_), data, size) != 1)
        throw RuntimeError("SHA-256 stream: EVP_DigestUpdate failed");
}

std::string Sha256Stream::hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int md_len = 0;
    if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX *>(ctx_), md.data(), &md_len) != 1)
        throw RuntimeError("SHA-256 stream: EVP_DigestFinal_ex failed");
    return to_hex(md.data(), md_len);
}

std::string sha256_hex(const void * data, std::size_t size) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int md_len = 0;
    if (EVP_Digest(data, size, md.data(), &md_len, EVP_sha256(), nullptr) != 1)
        throw RuntimeError("SHA-256 of " + std::to_string(size) + " bytes in memory failed (EVP_Digest)");
    return to_hex(md.data(), md_len);
}

}  // namespace ddo

namespace ddo {

std::optional<std::string> file_sha256(const std::filesystem::path & path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return std::nullopt;
    try {
        return digest_fd(fd.get(), path).sha256;
    } catch (const std::exception &) {
        return std::nullopt;
    }
}

}  // namespace ddo
