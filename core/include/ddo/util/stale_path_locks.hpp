// The lock files PathLock leaves when its process dies without releasing them (SIGKILL, the OOM killer, a crash): found
// under a directory and removed once no process holds them (Note [Path locks] in core/src/util/path_lock.cpp). A
// server restarted on its state directory sweeps them so that none of its predecessor's outlives it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ddo {

struct StaleLock {
    std::filesystem::path file;
    std::string holder;  // the lock's first line as its holder wrote it ("pid 1234"); empty when it wrote none
};

// Every `*.ddo-lock` file under `dir` (recursively; links not followed) that no live process holds: each is taken
// (flock, without waiting), removed and released, as PathLock releases its own. A lock another process holds is left
// alone. Never throws: a directory that cannot be opened is skipped, one whose listing fails partway is left at that
// entry, and the walk goes on with the other directories; a lock file that cannot be opened is left.
std::vector<StaleLock> remove_stale_path_locks(const std::filesystem::path & dir);

}  // namespace ddo
