#include "ddo/store/ggml_type.hpp"

#include <array>

namespace ddo::store {

namespace {

constexpr std::uint32_t kQK = 256;  // QK_K: elements per K-quant super-block

constexpr std::array kTypes = {
    GgmlTypeTraits{GgmlType::f32, "F32", 1, 4, true},
    GgmlTypeTraits{GgmlType::f16, "F16", 1, 2, true},
    GgmlTypeTraits{GgmlType::q4_0, "Q4_0", 32, 2 + 16, true},
    GgmlTypeTraits{GgmlType::q4_1, "Q4_1", 32, 2 + 2 + 16, true},
    GgmlTypeTraits{GgmlType::q5_0, "Q5_0", 32, 2 + 4 + 16, true},
    GgmlTypeTraits{GgmlType::q5_1, "Q5_1", 32, 2 + 2 + 4 + 16, true},
    GgmlTypeTraits{GgmlType::q8_0, "Q8_0", 32, 2 + 32, true},
    GgmlTypeTraits{GgmlType::q8_1, "Q8_1", 32, 4 + 4 + 32, false},
    GgmlTypeTraits{GgmlType::q2_k, "Q2_K", kQK, 2 + 2 + kQK / 16 + kQK / 4, true},
    GgmlTypeTraits{GgmlType::q3_k, "Q3_K", kQK, 2 + kQK / 4 + kQK / 8 + 12, true},
    GgmlTypeTraits{GgmlType::q4_k, "Q4_K", kQK, 2 + 2 + kQK / 2 + 12, true},
    GgmlTypeTraits{GgmlType::q5_k, "Q5_K", kQK, 2 + 2 + kQK / 2 + kQK / 8 + 12, true},
    GgmlTypeTraits{GgmlType::q6_k, "Q6_K", kQK, 2 + kQK / 2 + kQK / 4 + kQK / 16, true},
    GgmlTypeTraits{GgmlType::q8_k, "Q8_K", kQK, 4 + kQK + kQK / 8, false},
    GgmlTypeTraits{GgmlType::iq2_xxs, "IQ2_XXS", kQK, 2 + kQK / 4, false},
    GgmlTypeTraits{GgmlType::iq2_xs, "IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32, false},
    GgmlTypeTraits{GgmlType::iq3_xxs, "IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8, false},
    GgmlTypeTraits{GgmlType::iq1_s, "IQ1_S", kQK, 2 + kQK / 8 + kQK / 16, false},
    GgmlTypeTraits{GgmlType::iq4_nl, "IQ4_NL", 32, 2 + 16, false},
    GgmlTypeTraits{GgmlType::iq3_s, "IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4, false},
    GgmlTypeTraits{GgmlType::iq2_s, "IQ2_S", kQK, 2 + kQK / 4 + kQK / 16, false},
    GgmlTypeTraits{GgmlType::iq4_xs, "IQ4_XS", kQK, 2 + 2 + kQK / 2 + kQK / 64, false},
    GgmlTypeTraits{GgmlType::i8, "I8", 1, 1, false},
    GgmlTypeTraits{GgmlType::i16, "I16", 1, 2, false},
    GgmlTypeTraits{GgmlType::i32, "I32", 1, 4, false},
    GgmlTypeTraits{GgmlType::i64, "I64", 1, 8, false},
    GgmlTypeTraits{GgmlType::f64, "F64", 1, 8, false},
    GgmlTypeTraits{GgmlType::iq1_m, "IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32, false},
    GgmlTypeTraits{GgmlType::bf16, "BF16", 1, 2, true},
    GgmlTypeTraits{GgmlType::tq1_0, "TQ1_0", kQK, 2 + 4 * 13, false},
    GgmlTypeTraits{GgmlType::tq2_0, "TQ2_0", kQK, 2 + 64, false},
    GgmlTypeTraits{GgmlType::mxfp4, "MXFP4", 32, 1 + 16, false},
    GgmlTypeTraits{GgmlType::nvfp4, "NVFP4", 64, 4 + 32, false},
    GgmlTypeTraits{GgmlType::q1_0, "Q1_0", 128, 2 + 16, false},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) noexcept {
    for (const auto & t : kTypes)
        if (static_cast<std::uint32_t>(t.type) == id) return t;
    return std::nullopt;
}

std::string ggml_type_label(std::uint32_t id) {
    if (const auto t = ggml_type_traits(id)) return std::string(t->name);
    return "ggml type " + std::to_string(id) + " (unknown)";
}

std::string_view ggml_decodable_types() noexcept {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
}

}  // namespace ddo::store
