#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddo/error.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/util/atomic_write.hpp"

namespace ddo {

namespace fs = std::filesystem;

// Note [Atomic report write]: a reader (or a crash) sees either the previous report or the new one,
// never a torn file: write a temp file in the same directory, fsync it, rename over the target,
// then fsync the directory so the rename itself is durable.
void write_json_atomically(const fs::path & path, const nlohmann::json & j) {
    write_text_atomically(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "report");
}

void write_text_atomically(const fs::path & path, const std::string & text, const std::string & what_file) {
    auto fail = [&](const std::string & what) {
        throw RuntimeError(what_file + " " + path.string() + ": " + what + ": " + std::strerror(errno) +
                           "; check that the directory exists and is writable");
    };
    fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    std::error_code ec;
    fs::create_directories(dir, ec);
    // ".<name>.tmp.XXXXXX" unless that exceeds NAME_MAX (a 244-255 character name): then a short fixed one.
    std::string temp_name = "." + path.filename().string() + ".tmp.XXXXXX";
    if (temp_name.size() > 255) temp_name = ".ddo-write.tmp.XXXXXX";
    std::string tmpl = (dir / temp_name).string();
    int fd = mkstemp(tmpl.data());
    if (fd < 0) fail("cannot create temp file in " + dir.string());
    const char * p = text.data();
    size_t left = text.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            ::close(fd);
            ::unlink(tmpl.c_str());
            fail("write failed");
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
        ::close(fd);
        ::unlink(tmpl.c_str());
        fail("fsync failed");
    }
    ::close(fd);
    if (::rename(tmpl.c_str(), path.c_str()) != 0) {
        ::unlink(tmpl.c_str());
        fail("rename failed");
    }
    // The rename is durable only once the directory is synced. A filesystem that cannot sync directories (EINVAL)
    // is taken as it is; any other failure is an error: the file is in place but might not survive a crash.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("renamed into place, but its directory could not be opened to sync it");
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    errno = err;
    if (rc != 0 && err != EINVAL && err != ENOTSUP) fail("renamed into place, but syncing its directory failed");
}

}  // namespace ddo
