// Reads a plugin file's negotiate info without loading it into this process: a child process maps the file and
// calls ddo_plugin_negotiate only, and reports what it said. `ddo-host manifest add` uses it to write a manifest
// entry for a plugin that is not listed (and so may not be loaded here) yet.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ddo {

struct NegotiateInfo {
    std::string name, version, kind;  // kind: "model" | "allocator" | "unknown(<n>)"
    std::vector<std::string> aliases;
    std::string fingerprint;
    std::uint32_t abi_major = 0, abi_minor = 0;
};

// fd: the open plugin file (borrowed; the child maps /proc/self/fd/<fd>, the same inode the caller hashes).
// Throws VerificationError naming the file: not loadable (dlerror), no entry point, negotiate failed, the child
// crashed or did not answer within `timeout`.
NegotiateInfo negotiate_in_child(int fd, const std::filesystem::path & file,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace ddo
