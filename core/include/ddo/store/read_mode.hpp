// How tensor bytes are read from a checkpoint file into a host buffer.
#pragma once

#include <optional>
#include <string_view>

namespace ddo::store {

enum class ReadMode {
    mmap,    // copy out of a read-only mapping (page cache)
    pread,   // buffered pread(2)
    direct,  // O_DIRECT pread(2) of aligned extents through an aligned bounce buffer (bypasses the page cache)
};

std::string_view to_string(ReadMode m) noexcept;
std::optional<ReadMode> parse_read_mode(std::string_view s) noexcept;

}  // namespace ddo::store
