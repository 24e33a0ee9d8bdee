#include "ddo/store/unique_fd.hpp"

#include <unistd.h>

namespace ddo::store {

void UniqueFd::reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace ddo::store
