// RAII owner of a POSIX file descriptor.
#pragma once

#include <utility>

namespace ddo::store {

class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    UniqueFd(UniqueFd && o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    UniqueFd & operator=(UniqueFd && o) noexcept {
        if (this != &o) { reset(); fd_ = std::exchange(o.fd_, -1); }
        return *this;
    }
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd & operator=(const UniqueFd &) = delete;
    ~UniqueFd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    void reset() noexcept;

private:
    int fd_ = -1;
};

}  // namespace ddo::store
