// digest_fd: SHA-256 and XXH3-128 from a descriptor, in chunks, without moving the file offset.
#include <fcntl.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include <array>
#include <fstream>

#include "ddo/util/file_digest.hpp"
#include "ddo/util/unique_fd.hpp"
#include "plugin_test_support.hpp"

namespace ddo::test {
namespace {

std::string hex(const unsigned char * p, std::size_t n) {
    static const char * d = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
        s += d[p[i] >> 4];
        s += d[p[i] & 15];
    }
    return s;
}

FileDigest digest_of(const fs::path & file) {
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(fd) << file;
    return digest_fd(fd.get(), file);
}

void write_file(const fs::path & file, const std::string & bytes) {
    std::ofstream out(file, std::ios::binary);
    out << bytes;
}

TEST(FileDigest, KnownVectors) {
    TempDir tmp;
    write_file(tmp.path() / "empty", "");
    write_file(tmp.path() / "abc", "abc");
    const FileDigest empty = digest_of(tmp.path() / "empty");
    EXPECT_EQ(empty.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(empty.xxh3_128, "99aa06d3014798d86001c324468d497f");
    EXPECT_EQ(empty.size, 0u);
    const FileDigest abc = digest_of(tmp.path() / "abc");
    EXPECT_EQ(abc.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(abc.size, 3u);
    EXPECT_EQ(short_digest(abc.sha256), "ba7816bf8f01");
}

TEST(FileDigest, ChunkedMatchesOneShotAcrossChunkBoundaries) {
    TempDir tmp;
    std::string bytes(3 * (1u << 20) + 7, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
    write_file(tmp.path() / "big", bytes);

    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    ASSERT_EQ(EVP_Digest(bytes.data(), bytes.size(), md.data(), &len, EVP_sha256(), nullptr), 1);
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));

    const FileDigest d = digest_of(tmp.path() / "big");
    EXPECT_EQ(d.sha256, hex(md.data(), len));
    EXPECT_EQ(d.xxh3_128, hex(canonical.digest, sizeof canonical.digest));
    EXPECT_EQ(d.size, bytes.size());
}

// Sha256Stream (the PNG frames' and pixels' hashes of a video run): pieces of any sizes give sha256_hex of the whole.
TEST(FileDigest, Sha256StreamEqualsTheOneShotDigest) {
    std::string data(100000, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = char((i * 131 + 7) % 251);
    Sha256Stream s;
    std::size_t at = 0;
    for (std::size_t piece : {std::size_t(0), std::size_t(1), std::size_t(63), std::size_t(64), std::size_t(4097)}) {
        s.update(data.data() + at, piece);
        at += piece;
    }
    s.update(data.data() + at, data.size() - at);
    EXPECT_EQ(s.hex(), sha256_hex(data.data(), data.size()));
    Sha256Stream abc;
    abc.update("abc", 3);
    EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(FileDigest, LeavesTheDescriptorOffsetAlone) {
    TempDir tmp;
    write_file(tmp.path() / "f", "0123456789");
    UniqueFd fd(::open((tmp.path() / "f").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(::lseek(fd.get(), 4, SEEK_SET), 4);
    const FileDigest d = digest_fd(fd.get(), tmp.path() / "f");
    EXPECT_EQ(d.size, 10u);
    EXPECT_EQ(::lseek(fd.get(), 0, SEEK_CUR), 4);
}

TEST(FileDigest, AgreesWithTheBuildWrittenManifest) {
    const ArtifactEntry e = fixture_entry("fixture_good");
    const FileDigest d = digest_of(e.path);
    EXPECT_EQ(d.sha256, e.sha256);  // CMake's file(SHA256) wrote the manifest
    EXPECT_EQ(d.size, e.size);
}

}  // namespace
}  // namespace ddo::test
