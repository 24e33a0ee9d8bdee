#include "ddo/util/utf8_text.hpp"

#include <utf8proc.h>

namespace ddo {

std::optional<Utf8Position> first_invalid_utf8(std::string_view text) {
    Utf8Position at;
    const auto * p = reinterpret_cast<const utf8proc_uint8_t *>(text.data());
    std::size_t i = 0;
    while (i < text.size()) {
        utf8proc_int32_t cp = 0;
        const utf8proc_ssize_t n = utf8proc_iterate(p + i, utf8proc_ssize_t(text.size() - i), &cp);
        if (n <= 0 || cp < 0) {
            at.offset = i;
            return at;
        }
        if (cp == '\n') {
            ++at.line;
            at.column = 1;
        } else {
            ++at.column;
        }
        i += std::size_t(n);
    }
    return std::nullopt;
}

}  // namespace ddo
