// Byte counts in messages and plan notes: one spelling everywhere ("12.5 MiB").
#pragma once

#include <cstdint>
#include <string>

namespace ddo {

// bytes / 2^20 with one decimal and " MiB", e.g. 13107200 -> "12.5 MiB".
std::string format_mib(std::uint64_t bytes);

}  // namespace ddo
