// Tensor element types of the safetensors format and their sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ddo::store {

enum class DType : std::uint8_t {
    boolean, u8, i8, u16, i16, u32, i32, u64, i64,
    f16, bf16, f32, f64, f8_e4m3, f8_e5m2,
};

// Bytes per element.
std::uint32_t dtype_size(DType t) noexcept;
// The safetensors spelling ("BF16", "F8_E4M3", "BOOL", ...).
std::string_view dtype_name(DType t) noexcept;
// nullopt for a spelling we do not accept.
std::optional<DType> parse_dtype(std::string_view name) noexcept;

}  // namespace ddo::store
