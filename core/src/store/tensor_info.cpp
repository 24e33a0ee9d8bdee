#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

std::uint64_t TensorInfo::numel() const noexcept {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
}

}  // namespace ddo::store
