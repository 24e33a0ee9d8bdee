// UniqueFd: owns one POSIX file descriptor and closes it on destruction (move-only).
#pragma once

#include <unistd.h>

#include <utility>

namespace ddo {

class UniqueFd {
public:
    UniqueFd() noexcept = default;
    explicit UniqueFd(int fd /* owned from here on */) noexcept : fd_(fd) {}
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd & operator=(const UniqueFd &) = delete;
    UniqueFd(UniqueFd && other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    UniqueFd & operator=(UniqueFd && other) noexcept {
        if (this != &other) {
            reset();
            fd_ = std::exchange(other.fd_, -1);
        }
        return *this;
    }
    ~UniqueFd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    // Gives up ownership: the caller now closes (or deliberately keeps) the descriptor.
    int release() noexcept { return std::exchange(fd_, -1); }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
};

}  // namespace ddo
