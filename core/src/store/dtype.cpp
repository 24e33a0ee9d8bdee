#include "ddo/store/dtype.hpp"

#include <array>
#include <utility>

namespace ddo::store {
namespace {
struct Row { DType t; std::string_view name; std::uint32_t size; };
constexpr std::array<Row, 15> kRows{{
    {DType::boolean, "BOOL", 1}, {DType::u8, "U8", 1},   {DType::i8, "I8", 1},
    {DType::u16, "U16", 2},      {DType::i16, "I16", 2}, {DType::u32, "U32", 4},
    {DType::i32, "I32", 4},      {DType::u64, "U64", 8}, {DType::i64, "I64", 8},
    {DType::f16, "F16", 2},      {DType::bf16, "BF16", 2}, {DType::f32, "F32", 4},
    {DType::f64, "F64", 8},      {DType::f8_e4m3, "F8_E4M3", 1}, {DType::f8_e5m2, "F8_E5M2", 1},
}};
}  // namespace

std::uint32_t dtype_size(DType t) noexcept {
    for (const auto & r : kRows) if (r.t == t) return r.size;
    return 0;
}
std::string_view dtype_name(DType t) noexcept {
    for (const auto & r : kRows) if (r.t == t) return r.name;
    return "?";
}
std::optional<DType> parse_dtype(std::string_view name) noexcept {
    for (const auto & r : kRows) if (r.name == name) return r.t;
    return std::nullopt;
}

}  // namespace ddo::store
