#include "ddo/util/path_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <utility>

#include "ddo/error.hpp"

namespace ddo {
namespace fs = std::filesystem;

// Note [Path locks]: flock(2) on a lock file beside the target, taken without waiting. The holder removes the file
// before it releases the lock, so a second process can open the old inode just before it is removed and then lock
// it; after locking, each process therefore checks that the path still names the inode it holds and starts over if
// not. The lock dies with the process (a SIGKILLed run leaves a stale file, which the next run simply locks, and which
// remove_stale_path_locks removes: stale_path_locks.hpp, used by a server restarted on its state directory).
PathLock PathLock::acquire(const fs::path & target, const std::string & what) {
    const fs::path abs = fs::absolute(target);
    std::string name = "." + abs.filename().string() + ".ddo-lock";
    if (name.size() > 255)  // NAME_MAX: a long name gets a lock named by its hash
        name = ".ddo-" + std::to_string(std::hash<std::string>{}(abs.filename().string())) + ".ddo-lock";
    const fs::path file = abs.parent_path() / name;
    for (int attempt = 0; attempt < 16; ++attempt) {
        const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            throw UsageError(what + " " + abs.string() + ": cannot create its lock file " + file.string() + " (" +
                             std::strerror(errno) + "); check that the directory is writable");
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            std::string holder;
            std::ifstream in(file);
            std::getline(in, holder);
            ::close(fd);
            throw UsageError(what + " " + abs.string() + " is being written by another run (" +
                             (holder.empty() ? std::string("pid unknown") : holder) +
                             "); wait for it, or choose another --output / --report");
        }
        struct stat held {}, named {};
        if (::fstat(fd, &held) == 0 && ::stat(file.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev) {
            const std::string me = "pid " + std::to_string(::getpid()) + "\n";
            (void)!::ftruncate(fd, 0);
            (void)!::pwrite(fd, me.data(), me.size(), 0);
            PathLock l;
            l.fd_ = fd;
            l.file_ = file;
            return l;
        }
        ::close(fd);  // the holder removed it between our open and our lock: take the new one
    }
    throw UsageError(what + " " + abs.string() + ": could not take its lock " + file.string() + " (it kept changing)");
}

PathLock::PathLock(PathLock && o) noexcept : fd_(std::exchange(o.fd_, -1)), file_(std::move(o.file_)) {}

PathLock & PathLock::operator=(PathLock && o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::exchange(o.fd_, -1);
        file_ = std::move(o.file_);
    }
    return *this;
}

PathLock::~PathLock() { release(); }

void PathLock::release() noexcept {
    if (fd_ < 0) return;
    std::error_code ec;
    fs::remove(file_, ec);  // before the release: see Note [Path locks]
    ::close(fd_);
    fd_ = -1;
}

}  // namespace ddo
