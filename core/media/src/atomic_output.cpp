// The temp-file-then-rename output of the media writers (atomic_output.hpp).
#include "atomic_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ddo/error.hpp"
#include "ddo/util/file_digest.hpp"

namespace ddo::media::detail {

namespace fs = std::filesystem;

namespace {

std::string exists_message(const std::string & describe) {
    return describe + " already exists; ddo does not overwrite an output: choose another output path or remove the file";
}

}  // namespace

AtomicOutput::AtomicOutput(const fs::path & target, Overwrite overwrite, std::string what)
    : target_(target), overwrite_(overwrite), what_(std::move(what)) {
    std::error_code ec;
    if (overwrite_ == Overwrite::refuse && fs::exists(fs::symlink_status(target_, ec))) throw UsageError(exists_message(describe()));
    fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    fs::create_directories(dir, ec);
    // ".<name>.tmp.XXXXXX" unless that exceeds NAME_MAX: then a short fixed one (as write_text_atomically).
    std::string temp_name = "." + target_.filename().string() + ".tmp.XXXXXX";
    if (temp_name.size() > 255) temp_name = ".ddo-media.tmp.XXXXXX";
    std::string tmpl = (dir / temp_name).string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        throw RuntimeError(describe() + ": cannot create a temp file in " + dir.string() + ": " + std::strerror(errno) +
                           "; check that the directory exists and is writable");
    ::close(fd);  // libavformat reopens it by name (the MP4 muxer's +faststart pass reads it back)
    temp_ = tmpl;
}

AtomicOutput::~AtomicOutput() {
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

WrittenFile AtomicOutput::commit() {
    auto fail = [&](const std::string & step) {
        throw RuntimeError(describe() + ": " + step + " failed: " + std::strerror(errno) +
                           "; check the disk (space, permissions) and run again");
    };
    int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("reopening the temp file " + temp_.string());
    if (::fsync(fd) != 0 || ::fchmod(fd, 0644) != 0) {
        int e = errno;
        ::close(fd);
        errno = e;
        fail("fsync of " + temp_.string());
    }
    FileDigest digest;
    try {
        digest = digest_fd(fd, temp_);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    if (overwrite_ == Overwrite::replace) {
        if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("renaming the temp file onto the target");
    } else if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) != 0) {
        if (errno == EEXIST) throw UsageError(exists_message(describe()));
        // A file system without RENAME_NOREPLACE: link() refuses an existing name just as atomically.
        if (errno != EINVAL || ::link(temp_.c_str(), target_.c_str()) != 0) {
            if (errno == EEXIST) throw UsageError(exists_message(describe()));
            fail("renaming the temp file onto the target");
        }
        ::unlink(temp_.c_str());
    }
    committed_ = true;
    fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
    return WrittenFile{target_, digest.sha256, digest.size};
}

}  // namespace ddo::media::detail
