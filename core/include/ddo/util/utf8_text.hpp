// UTF-8 checks of input text before a parser sees it (issue 16: toml++ 3.3 reaches undefined behaviour on some
// invalid UTF-8, so preset files, manifests and --set values are checked first). The decoding is utf8proc's.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace ddo {

// Where the first byte sequence that is not UTF-8 starts: byte offset, and 1-based line and column (in code points).
struct Utf8Position {
    std::size_t offset = 0;
    int line = 1;
    int column = 1;
};
std::optional<Utf8Position> first_invalid_utf8(std::string_view text);

}  // namespace ddo
