// One tensor of a checkpoint: its name, type, shape and where its bytes lie.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddo/store/dtype.hpp"

namespace ddo::store {

struct TensorInfo {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t file_offset = 0;  // absolute offset of the first byte in its file
    std::uint64_t nbytes = 0;       // = product(shape) * dtype_size(dtype), validated
    std::uint32_t file_index = 0;   // index into WeightStore::files() (0 for a single file)

    std::uint64_t numel() const noexcept;
};

}  // namespace ddo::store
