// PathLock: this process's exclusive claim on an output path for the life of a run (Note [Path locks] in
// core/src/util/path_lock.cpp). Two runs that would write the same report or image: the second is refused at once
// (exit 2) with the pid that holds it, instead of both writing and one report hashing the other's file.
#pragma once

#include <filesystem>
#include <string>

namespace ddo {

class PathLock {
public:
    // Claims `target` (the file need not exist): flock on <dir>/.<name>.ddo-lock, which holds the holder's pid.
    // Throws UsageError naming `what`, the path and the holder when another process has it.
    static PathLock acquire(const std::filesystem::path & target, const std::string & what);
    PathLock() = default;
    PathLock(PathLock && o) noexcept;
    PathLock & operator=(PathLock && o) noexcept;
    PathLock(const PathLock &) = delete;
    PathLock & operator=(const PathLock &) = delete;
    ~PathLock();  // removes the lock file, then releases

private:
    void release() noexcept;  // removes the lock file, then closes the descriptor (which releases the lock)

    int fd_ = -1;
    std::filesystem::path file_;
};

}  // namespace ddo
