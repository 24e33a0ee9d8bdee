#include "ddo/store/read_mode.hpp"

namespace ddo::store {

std::string_view to_string(ReadMode m) noexcept {
    switch (m) {
        case ReadMode::mmap: return "mmap";
        case ReadMode::pread: return "pread";
        case ReadMode::direct: return "direct";
    }
    return "?";
}

std::optional<ReadMode> parse_read_mode(std::string_view s) noexcept {
    if (s == "mmap") return ReadMode::mmap;
    if (s == "pread") return ReadMode::pread;
    if (s == "direct" || s == "o_direct") return ReadMode::direct;
    return std::nullopt;
}

}  // namespace ddo::store
