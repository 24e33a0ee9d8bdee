// The tensor types of GGML (the `ggml_type` ids a GGUF file stores per tensor): name, block size in elements and
// bytes per block, as gguf-py's GGML_QUANT_SIZES (gguf 0.19). Every id GGML defines is known by name, so a file with
// a type ddo cannot decode is refused naming it; `decodable` says which ones ddo dequantizes
// (ddo/torch/quant/ggml_dequantize.hpp). Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddo::store {

enum class GgmlType : std::uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
    q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
    iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
    i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
    tq1_0 = 34, tq2_0 = 35, mxfp4 = 39, nvfp4 = 40, q1_0 = 41,
};

struct GgmlTypeTraits {
    GgmlType type;
    std::string_view name;        // GGML's spelling: "Q4_K", "BF16", ...
    std::uint32_t block_elems;    // elements per block (1 for the plain types)
    std::uint32_t block_bytes;    // bytes per block
    bool decodable;               // ddo dequantizes it
};

// nullopt for an id GGML does not define.
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) noexcept;
// "Q4_K", or "ggml type 99 (unknown)" for an id GGML does not define.
std::string ggml_type_label(std::uint32_t id);
// The types ddo decodes, comma-separated, for error messages.
std::string_view ggml_decodable_types() noexcept;

}  // namespace ddo::store
