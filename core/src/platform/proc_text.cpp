#include "proc_text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddo::platform {

std::optional<std::string> read_text_file(const std::filesystem::path & path, std::string * error) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *error = "cannot open " + path.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            *error = "cannot read " + path.string() + ": " + std::strerror(errno);
            ::close(fd);
            return std::nullopt;
        }
        if (n == 0) {
            break;
        }
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > (1u << 20)) {
            *error = path.string() + " is larger than 1 MiB; not a /proc or /sys text file";
            ::close(fd);
            return std::nullopt;
        }
    }
    ::close(fd);
    return out;
}

std::optional<std::string> read_first_line(const std::filesystem::path & path, std::string * error) {
    auto text = read_text_file(path, error);
    if (!text) {
        return std::nullopt;
    }
    std::string line = text->substr(0, text->find('\n'));
    const auto first = line.find_first_not_of(" \t\r");
    const auto last = line.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string() : line.substr(first, last - first + 1);
}

std::optional<std::uint64_t> parse_decimal(std::string_view text) {
    if (text.empty() || text.size() > 20) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return std::nullopt;
        }
        v = v * 10 + d;
    }
    return v;
}

std::optional<std::uint64_t> find_kb_field(std::string_view text, std::string_view key) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') {
            continue;
        }
        std::string_view rest = line.substr(key.size() + 1);
        const auto b = rest.find_first_not_of(" \t");
        if (b == std::string_view::npos) {
            return std::nullopt;
        }
        rest = rest.substr(b);
        const auto e = rest.find_first_of(" \t");
        auto number = parse_decimal(rest.substr(0, e));
        if (!number) {
            return std::nullopt;
        }
        const bool kb = e != std::string_view::npos && rest.find("kB", e) != std::string_view::npos;
        return kb ? *number * 1024 : *number;
    }
    return std::nullopt;
}

}  // namespace ddo::platform
