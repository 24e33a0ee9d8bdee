#include "ddo/util/format_bytes.hpp"

#include <cstdio>

namespace ddo {

std::string format_mib(std::uint64_t bytes) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace ddo
