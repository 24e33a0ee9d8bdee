// The host's one spelling of a byte count for people: "0 B", "40.50 KiB", "688.50 MiB", "1.500 GiB" (the run
// console and `report summarize`).
#pragma once

#include <cstdio>
#include <string>

namespace ddo::host {

inline std::string human_bytes(double b) {
    char out[32];
    if (b >= 1073741824.0) std::snprintf(out, sizeof out, "%.3f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) std::snprintf(out, sizeof out, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024.0) std::snprintf(out, sizeof out, "%.2f KiB", b / 1024.0);
    else std::snprintf(out, sizeof out, "%.0f B", b);
    return out;
}

}  // namespace ddo::host
