#include "test_paths.hpp"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

namespace fs = std::filesystem;

namespace ddo::test {
namespace {

[[noreturn]] void fail(const std::string & what) {
    std::fprintf(stderr, "test_paths: %s\n", what.c_str());
    std::abort();
}

struct Trees {
    std::string build;
    std::string source;
};

Trees find_trees() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) fail("cannot read /proc/self/exe: " + ec.message());
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
        const fs::path cache = dir / "CMakeCache.txt";
        if (fs::is_regular_file(cache, ec)) {
            std::ifstream in(cache);
            const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
            for (std::string line; std::getline(in, line);) {
                if (line.rfind(key, 0) == 0) return {dir.string(), line.substr(key.size())};
            }
            fail(cache.string() + " has no CMAKE_HOME_DIRECTORY; reconfigure the build tree");
        }
        if (dir == dir.root_path()) break;
    }
    fail("no CMakeCache.txt above " + exe.string() + "; run the test from its build tree");
}

const Trees & trees() {
    static const Trees t = find_trees();
    return t;
}

const char * keep(const std::string & base, const char * relative) {
    static std::mutex mutex;
    static std::deque<std::string> kept;  // a deque never moves its elements: the pointers stay valid
    std::lock_guard<std::mutex> lock(mutex);
    const std::string rel = relative ? relative : "";
    kept.push_back(rel.empty() ? base : base + "/" + rel);
    return kept.back().c_str();
}

}  // namespace

const char * build_path(const char * relative) { return keep(trees().build, relative); }
const char * source_path(const char * relative) { return keep(trees().source, relative); }

}  // namespace ddo::test
