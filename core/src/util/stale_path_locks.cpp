// remove_stale_path_locks (stale_path_locks.hpp): the PathLock protocol of path_lock.cpp, seen from outside.
#include "ddo/util/stale_path_locks.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace ddo {
namespace fs = std::filesystem;

namespace {

// The lock `file` when no process holds it: taken, removed, released (see Note [Path locks]: a taker that opened the
// old inode just before the removal finds, after locking it, that the path no longer names it, and starts over).
// flock decides, not the pid the holder wrote: the lock dies with its process, whereas a pid may since name another.
bool remove_if_stale(const fs::path & file, std::string & holder) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd);
        return false;  // held: its process is alive
    }
    bool removed = false;
    struct stat held {}, named {};
    if (::fstat(fd, &held) == 0 && ::lstat(file.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
        std::ifstream in(file);
        std::getline(in, holder);
        std::error_code ec;
        removed = fs::remove(file, ec);
    }
    ::close(fd);
    return removed;
}

}  // namespace

std::vector<StaleLock> remove_stale_path_locks(const fs::path & dir) {
    std::vector<StaleLock> out;
    // Each directory listed on its own (not one recursive_directory_iterator: its first error ends the whole walk), so
    // that a directory that cannot be opened, or whose listing fails partway, is skipped and the walk goes on.
    std::vector<fs::path> todo{dir};
    while (!todo.empty()) {
        const fs::path d = std::move(todo.back());
        todo.pop_back();
        std::error_code ec;
        for (auto it = fs::directory_iterator(d, fs::directory_options::skip_permission_denied, ec);
             !ec && it != fs::directory_iterator(); it.increment(ec)) {
            const fs::path & p = it->path();
            std::error_code type_ec;
            if (it->is_symlink(type_ec)) continue;  // links not followed
            if (it->is_directory(type_ec)) {
                todo.push_back(p);
                continue;
            }
            if (!p.filename().string().ends_with(".ddo-lock") || !it->is_regular_file(type_ec)) continue;
            StaleLock s{p, {}};
            if (remove_if_stale(p, s.holder)) out.push_back(std::move(s));
        }
    }
    return out;
}

}  // namespace ddo
