// Small readers for /proc and /sys text files (internal to core/src/platform). Errors name the file
// and the errno text; nothing throws.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ddo::platform {

// Whole file (files under /proc report size 0, so this reads until EOF). nullopt + *error on failure.
std::optional<std::string> read_text_file(const std::filesystem::path & path, std::string * error);

// First line, whitespace-trimmed.
std::optional<std::string> read_first_line(const std::filesystem::path & path, std::string * error);

// "Key:   123 kB" lines (meminfo, status): the value of `key` in bytes (kB multiplied out).
std::optional<std::uint64_t> find_kb_field(std::string_view text, std::string_view key);

// Decimal unsigned integer, whole string.
std::optional<std::uint64_t> parse_decimal(std::string_view text);

}  // namespace ddo::platform
