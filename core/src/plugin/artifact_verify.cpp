#include "ddo/plugin/artifact_verify.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <variant>

#include "ddo/error.hpp"
#include "ddo/util/build_info.hpp"

namespace ddo {

namespace fs = std::filesystem;

namespace {

constexpr const char * kRebuildStep =
    "rebuild it (tools/ddo build), or for a drop-in plugin re-review the file and update its artifacts.toml entry";

std::string file_type(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "not a regular file";
}

// openat2 confines the walk to dir_fd and refuses every symlink on the way; kernels without it
// (or sandboxes that filter it) get openat + O_NOFOLLOW, which still refuses a symlinked file.
int open_beneath(int dir_fd, const fs::path & rel) {
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
    long fd = ::syscall(SYS_openat2, dir_fd, rel.c_str(), &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM && errno != E2BIG)) return static_cast<int>(fd);
    return ::openat(dir_fd, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

}  // namespace

std::string mode_string(unsigned mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", mode & 07777u);
    return buf;
}

std::string host_platform() {
    utsname u{};
    if (::uname(&u) != 0) return "linux-unknown";
    return std::string("linux-") + u.machine;
}

namespace {

// verify_artifact's steps, in order; each refusal names the file and the next step.
struct Refusal {
    RefusalKind kind;
    std::string reason;
};

// 1. The manifest directory, opened: `rel` (the artifact beneath `dir`) must not escape it, and it must not be
//    group/world-writable without the sticky bit.
std::variant<UniqueFd, Refusal> open_manifest_dir(const ArtifactEntry & artifact, const fs::path & dir, const fs::path & rel) {
    const std::string file = artifact.path.string();
    if (rel.empty() || *rel.begin() == "..")
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' lies outside its manifest directory '" + dir.string() +
                                                     "'; list only files beneath the manifest"};
    UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd)
        return Refusal{RefusalKind::open_failed,
                       "cannot open plugin directory '" + dir.string() + "': " + std::strerror(errno) + "; check the path and its permissions"};
    struct stat dir_st{};
    if (::fstat(dir_fd.get(), &dir_st) == 0 && (dir_st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (dir_st.st_mode & S_ISVTX) == 0)
        return Refusal{RefusalKind::unsafe_file, "plugin directory '" + dir.string() + "' is group/world-writable (mode " +
                                                     mode_string(dir_st.st_mode) + "), so others could swap '" + file + "'; run 'chmod go-w " +
                                                     dir.string() + "' and verify again"};
    return dir_fd;
}

// 2. The artifact, opened once beneath dir_fd without following links. Everything after uses this descriptor.
std::variant<UniqueFd, Refusal> open_artifact(const ArtifactEntry & artifact, int dir_fd, const fs::path & dir, const fs::path & rel) {
    UniqueFd fd(open_beneath(dir_fd, rel));
    if (fd) return fd;
    const int err = errno;
    const std::string file = artifact.path.string();
    if (err == ELOOP)
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' is (or passes through) a symbolic link; refused because the bytes "
                                                 "hashed must be the bytes loaded. Copy the real file into the plugin directory instead"};
    if (err == EXDEV)
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' resolves outside '" + dir.string() + "'; list only files beneath the manifest"};
    if (err == ENOENT)
        return Refusal{RefusalKind::open_failed,
                       "artifact '" + file + "' listed in '" + artifact.manifest.string() + "' does not exist; " + kRebuildStep};
    return Refusal{RefusalKind::open_failed, "cannot open artifact '" + file + "': " + std::strerror(err) + "; check its permissions"};
}

// 3. What was opened must be a regular file only we (or root) can change.
std::optional<Refusal> check_opened_file(const ArtifactEntry & artifact, int fd) {
    const std::string file = artifact.path.string();
    struct stat st{};
    if (::fstat(fd, &st) != 0) return Refusal{RefusalKind::open_failed, "cannot stat artifact '" + file + "': " + std::strerror(errno)};
    if (!S_ISREG(st.st_mode))
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' is " + file_type(st.st_mode) + ", expected a regular file; " + kRebuildStep};
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' is group/world-writable (mode " + mode_string(st.st_mode) +
                                                     ", expected no write bit for group " + "and others); run 'chmod go-w " + file +
                                                     "' and verify again"};
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
        return Refusal{RefusalKind::unsafe_file, "artifact '" + file + "' is owned by uid " + std::to_string(st.st_uid) + ", expected uid " +
                                                     std::to_string(::geteuid()) + " or root; reinstall it as this user"};
    return std::nullopt;
}

// 4a. A memfd the hashed bytes are copied into, to load; none (and seal_reason says why) when the kernel gives none.
UniqueFd create_sealable_copy(const std::string & artifact_name, std::string & seal_reason) {
    const std::string name = "ddo-plugin:" + artifact_name;
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    UniqueFd copy;
#ifdef MFD_EXEC
    copy = UniqueFd(::memfd_create(name.c_str(), flags | MFD_EXEC));  // kernels with vm.memfd_noexec
    if (!copy && errno == EINVAL)
#endif
        copy = UniqueFd(::memfd_create(name.c_str(), flags));
    if (!copy) seal_reason = std::string("memfd_create failed: ") + std::strerror(errno);
    return copy;
}

// 4b. Hash from the descriptor, SHA-256 and XXH3-128 in one pass, into verdict.digest — and, when `copy` is open,
//     copy the same bytes into it and seal it, so the bytes hashed are the bytes mapped whatever happens to the file
//     later. Returns whether `copy` holds the sealed bytes (else verdict.seal_reason says why). Throws Error when the
//     file cannot be read.
bool digest_and_seal(int fd, const fs::path & path, const UniqueFd & copy, ArtifactVerdict & verdict) {
    bool copy_ok = static_cast<bool>(copy);
    auto sink = [&](const unsigned char * p, std::size_t n) {
        while (n > 0) {
            const ssize_t w = ::write(copy.get(), p, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                verdict.seal_reason = std::string("writing the sealed copy failed: ") + std::strerror(errno);
                copy_ok = false;
                return false;
            }
            p += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;
    };
    verdict.digest = copy_ok ? digest_fd(fd, path, sink) : digest_fd(fd, path);
    if (copy_ok && ::fcntl(copy.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        verdict.seal_reason = std::string("sealing the copy failed: ") + std::strerror(errno);
        copy_ok = false;
    }
    return copy_ok;
}

// 4c. The digest must be the manifest's: SHA-256 first, then size.
std::optional<Refusal> check_digest(const ArtifactEntry & artifact, const FileDigest & digest) {
    const std::string file = artifact.path.string();
    if (digest.sha256 != artifact.sha256) {
        std::string size_note;
        if (digest.size != artifact.size)
            size_note = "; size expected " + std::to_string(artifact.size) + " bytes, found " + std::to_string(digest.size);
        return Refusal{RefusalKind::digest_mismatch, "artifact '" + file + "': sha256 mismatch (expected " + artifact.sha256 + " from '" +
                                                         artifact.manifest.string() + "', found " + digest.sha256 + size_note + "); " + kRebuildStep};
    }
    if (digest.size != artifact.size)
        return Refusal{RefusalKind::digest_mismatch, "artifact '" + file + "': size mismatch (expected " + std::to_string(artifact.size) +
                                                         " bytes from '" + artifact.manifest.string() + "', found " + std::to_string(digest.size) +
                                                         "); " + kRebuildStep};
    return std::nullopt;
}

// 5. Built for this machine and this exact build (Note [Artifact manifest]).
std::optional<Refusal> check_build(const ArtifactEntry & artifact) {
    const std::string file = artifact.path.string();
    const std::string platform = host_platform();
    if (artifact.platform != platform)
        return Refusal{RefusalKind::platform_mismatch, "artifact '" + file + "' is built for platform '" + artifact.platform + "', this host is '" +
                                                           platform + "'; use a build of the plugin for " + platform};
    const std::string & fingerprint = build_info().fingerprint;
    if (artifact.fingerprint != fingerprint)
        return Refusal{RefusalKind::fingerprint_mismatch, "artifact '" + file + "': build fingerprint mismatch (expected '" + fingerprint +
                                                              "' of this ddo-host, manifest '" + artifact.manifest.string() + "' says '" +
                                                              artifact.fingerprint + "'); rebuild the plugin together with the host (tools/ddo build)"};
    return std::nullopt;
}

}  // namespace

ArtifactVerdict verify_artifact(const ArtifactEntry & artifact, bool sealed_copy) {
    ArtifactVerdict verdict;
    auto refuse = [&verdict](Refusal r) {
        verdict.refusal = r.kind;
        verdict.reason = std::move(r.reason);
        verdict.fd.reset();
        return std::move(verdict);
    };
    // The manifest's directory is the root nothing may escape from.
    const fs::path dir = artifact.manifest.empty() ? artifact.path.parent_path() : artifact.manifest.parent_path();
    const fs::path rel = artifact.path.lexically_relative(dir);
    auto dir_fd = open_manifest_dir(artifact, dir, rel);
    if (auto * r = std::get_if<Refusal>(&dir_fd)) return refuse(std::move(*r));
    auto opened = open_artifact(artifact, std::get<UniqueFd>(dir_fd).get(), dir, rel);
    if (auto * r = std::get_if<Refusal>(&opened)) return refuse(std::move(*r));
    UniqueFd fd = std::move(std::get<UniqueFd>(opened));
    if (auto r = check_opened_file(artifact, fd.get())) return refuse(std::move(*r));

    const auto t0 = std::chrono::steady_clock::now();
    UniqueFd copy = sealed_copy ? create_sealable_copy(artifact.name, verdict.seal_reason) : UniqueFd();
    bool copy_ok = false;
    try {
        copy_ok = digest_and_seal(fd.get(), artifact.path, copy, verdict);
    } catch (const Error & e) {
        return refuse({RefusalKind::open_failed, e.what()});
    }
    verdict.seal_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (auto r = check_digest(artifact, verdict.digest)) return refuse(std::move(*r));
    if (auto r = check_build(artifact)) return refuse(std::move(*r));

    if (copy_ok) {
        verdict.fd = std::move(copy);
        verdict.sealed = true;
    } else {
        verdict.fd = std::move(fd);
    }
    return verdict;
}

}  // namespace ddo
