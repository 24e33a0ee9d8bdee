#include "ddo/util/utf8_text.hpp"

#include <utf8proc.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ddo/error.hpp"

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

std::string read_utf8_file(const std::filesystem::path & file, const std::string & what) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UsageError(what + " " + file.string() + ": cannot open it (" + std::strerror(errno) + ")");
    std::ostringstream buf;
    buf << in.rdbuf();
    std::string text = buf.str();
    if (const auto bad = first_invalid_utf8(text))
        throw UsageError(what + " " + file.string() + ":" + std::to_string(bad->line) + ":" + std::to_string(bad->column) +
                         ": not UTF-8 (byte " + std::to_string(bad->offset) + "); save the file as UTF-8");
    return text;
}

}  // namespace ddo
