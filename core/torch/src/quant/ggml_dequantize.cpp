// Each decoder mirrors gguf-py 0.19 quants.py `<Type>.dequantize_blocks`: the integer unpacking may differ in form, the
// float operations (f16 -> f32 conversions, products, sums) are the reference's, in its order.
#include "ddo/torch/quant/ggml_dequantize.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/store/ggml_type.hpp"
#include "host_kernels.hpp"

namespace ddo::torch::quant {

namespace {

using ddo::store::GgmlType;
using at::indexing::Slice;

// Bytes [from, from + n) of every block, as a contiguous [blocks, n] uint8 tensor.
at::Tensor field(const at::Tensor & b, int64_t from, int64_t n) { return b.index({Slice(), Slice(from, from + n)}).contiguous(); }
// A little-endian f16 at byte `from` of every block, as float32 [blocks, 1].
at::Tensor half_field(const at::Tensor & b, int64_t from) { return field(b, from, 2).view(at::kHalf).to(at::kFloat); }
// The low and high nibbles of qs [blocks, n] as [blocks, 2, n] (low nibbles first).
at::Tensor nibbles(const at::Tensor & qs) { return at::stack({qs.bitwise_and(0x0F), qs.bitwise_right_shift(4)}, 1); }
// Bit k (k = 0..7) of every byte of q [blocks, n] as [blocks, 8, n].
at::Tensor bits_of(const at::Tensor & q) {
    std::vector<at::Tensor> v;
    for (int k = 0; k < 8; ++k) v.push_back(q.bitwise_right_shift(k).bitwise_and(1));
    return at::stack(v, 1);
}
// The 2-bit fields at shifts 0, 2, 4, 6 of q [blocks, m, n] as [blocks, m, 4, n].
at::Tensor crumbs(const at::Tensor & q) {
    std::vector<at::Tensor> v;
    for (int k = 0; k < 8; k += 2) v.push_back(q.bitwise_right_shift(k).bitwise_and(3));
    return at::stack(v, 2);
}

// In place where the reference computes a fresh product: the same float operations (x * d, then - dm), one pass and
// one allocation fewer (a decode runs at every acquire of a streamed group: its memory traffic is the step's cost).
at::Tensor q8_0(const at::Tensor & b) {
    const auto d = half_field(b, 0);
    auto x = b.index({Slice(), Slice(2, 34)}).view(at::kChar).to(at::kFloat);  // strided int8 read, one fp32 write
    return x.mul_(d);
}

at::Tensor q4_0(const at::Tensor & b, bool with_min) {
    const int64_t n = b.size(0);
    const auto d = half_field(b, 0);
    const auto qs = nibbles(field(b, with_min ? 4 : 2, 16)).reshape({n, 32});
    if (!with_min) return d * (qs.to(at::kShort) - 8).to(at::kFloat);
    return d * qs.to(at::kFloat) + half_field(b, 2);
}

at::Tensor q5_0(const at::Tensor & b, bool with_min) {
    const int64_t n = b.size(0);
    const int64_t o = with_min ? 4 : 2;  // qh after d (and m)
    const auto d = half_field(b, 0);
    const auto qh = bits_of(field(b, o, 4)).permute({0, 2, 1}).reshape({n, 32});  // element e: bit e of the u32
    const auto ql = nibbles(field(b, o + 4, 16)).reshape({n, 32});
    const auto q = ql.bitwise_or(qh.bitwise_left_shift(4));
    if (!with_min) return d * (q.to(at::kShort) - 16).to(at::kFloat);
    return d * q.to(at::kFloat) + half_field(b, 2);
}

// Q4_K / Q5_K: the 6-bit scales and mins of the 8 sub-blocks from the 12 scale bytes at `from`.
std::pair<at::Tensor, at::Tensor> k_scale_min(const at::Tensor & b, int64_t from) {
    const auto s = field(b, from, 12).reshape({b.size(0), 3, 4});
    const auto d = s.select(1, 0), m = s.select(1, 1), md = s.select(1, 2);
    const auto sc = at::cat({d.bitwise_and(0x3F), md.bitwise_and(0x0F).bitwise_or(d.bitwise_right_shift(2).bitwise_and(0x30))}, -1);
    const auto mn = at::cat({m.bitwise_and(0x3F), md.bitwise_right_shift(4).bitwise_or(m.bitwise_right_shift(2).bitwise_and(0x30))}, -1);
    return {sc, mn};
}

at::Tensor q4_k(const at::Tensor & b, bool five) {
    const int64_t n = b.size(0);
    const auto [sc, mn] = k_scale_min(b, 4);
    const auto d = (half_field(b, 0) * sc.to(at::kFloat)).reshape({n, 8, 1});
    const auto dm = (half_field(b, 2) * mn.to(at::kFloat)).reshape({n, 8, 1});
    const int64_t qs_at = five ? 48 : 16;
    // Byte group c (32 bytes) holds sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
    auto q = nibbles(field(b, qs_at, 128).reshape({n * 4, 32})).reshape({n, 8, 32});
    if (five) q = q.bitwise_or(bits_of(field(b, 16, 32)).bitwise_left_shift(4));  // qh byte i: bit j of sub-block j
    return q.to(at::kFloat).mul_(d).sub_(dm).reshape({n, 256});  // (d * q) - dm, in place
}

at::Tensor q6_k(const at::Tensor & b) {
    const int64_t n = b.size(0);
    const auto scales = field(b, 192, 16).view(at::kChar).to(at::kFloat);
    const auto d = (half_field(b, 208) * scales).reshape({n, 16, 1});
    const auto ql = nibbles(field(b, 0, 128).reshape({n * 2, 64})).reshape({n, 8, 32});
    const auto qh = crumbs(field(b, 128, 64).reshape({n, 2, 32})).reshape({n, 8, 32});
    const auto q = (ql.bitwise_or(qh.bitwise_left_shift(4)).to(at::kShort) - 32).reshape({n, 16, 16}).to(at::kFloat);
    return (d * q).reshape({n, 256});
}

at::Tensor q2_k(const at::Tensor & b) {
    const int64_t n = b.size(0);
    const auto scales = field(b, 0, 16);
    const auto dl = (half_field(b, 80) * scales.bitwise_and(0x0F).to(at::kFloat)).reshape({n, 16, 1});
    const auto ml = (half_field(b, 82) * scales.bitwise_right_shift(4).to(at::kFloat)).reshape({n, 16, 1});
    const auto qs = crumbs(field(b, 16, 64).reshape({n, 2, 32})).reshape({n, 16, 16}).to(at::kFloat);
    return (dl * qs - ml).reshape({n, 256});
}

at::Tensor q3_k(const at::Tensor & b) {
    const int64_t n = b.size(0);
    const auto s = field(b, 96, 12);
    const auto lo = nibbles(s.index({Slice(), Slice(0, 8)}).contiguous()).reshape({n, 16});
    const auto hi = crumbs(s.index({Slice(), Slice(8, 12)}).contiguous().reshape({n, 1, 4})).reshape({n, 16});
    const auto sc = (lo.bitwise_or(hi.bitwise_left_shift(4)).to(at::kShort) - 32).to(at::kFloat);
    const auto dl = (half_field(b, 108) * sc).reshape({n, 16, 1});
    const auto ql = crumbs(field(b, 32, 64).reshape({n, 2, 32})).reshape({n, 16, 16});
    const auto qh = bits_of(field(b, 0, 32)).reshape({n, 16, 16}).bitwise_xor(1);  // the offset is 4 when the bit is 0
    const auto q = (ql.to(at::kShort) - qh.to(at::kShort).bitwise_left_shift(2)).to(at::kFloat);
    return (dl * q).reshape({n, 256});
}

// The blocks of a tensor of `shape` in GGML type `type` as [blocks, block bytes]; throws when ddo does not decode the
// type or the byte count does not match the shape.
at::Tensor blocks_of(const at::Tensor & blocks, std::uint32_t type, at::IntArrayRef shape) {
    const auto tt = ddo::store::ggml_type_traits(type);
    if (!tt || !tt->decodable)
        throw RuntimeError("GGML type " + ddo::store::ggml_type_label(type) + " is not one ddo decodes (" +
                           std::string(ddo::store::ggml_decodable_types()) + "); re-quantize the file to one of them");
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    const int64_t n_blocks = numel / tt->block_elems;
    if (blocks.scalar_type() != at::kByte || numel % tt->block_elems != 0 || blocks.numel() != n_blocks * int64_t(tt->block_bytes))
        throw RuntimeError("a " + std::string(tt->name) + " tensor of " + std::to_string(numel) + " elements needs " +
                           std::to_string(numel / tt->block_elems * tt->block_bytes) + " bytes, the stored tensor has " +
                           std::to_string(blocks.numel()) + " " + std::string(c10::toString(blocks.scalar_type())) + " elements");
    return blocks.contiguous().reshape({n_blocks, int64_t(tt->block_bytes)});
}

}  // namespace

at::Tensor ggml_dequantize(const at::Tensor & blocks, std::uint32_t type, at::IntArrayRef shape) {
    const auto b = blocks_of(blocks, type, shape);
    at::Tensor y;
    switch (static_cast<GgmlType>(type)) {
        case GgmlType::f32: y = b.view(at::kFloat).clone(); break;
        case GgmlType::f16: y = b.view(at::kHalf).to(at::kFloat); break;
        case GgmlType::bf16: y = b.view(at::kBFloat16).to(at::kFloat); break;
        case GgmlType::q8_0: y = q8_0(b); break;
        case GgmlType::q4_0: y = q4_0(b, false); break;
        case GgmlType::q4_1: y = q4_0(b, true); break;
        case GgmlType::q5_0: y = q5_0(b, false); break;
        case GgmlType::q5_1: y = q5_0(b, true); break;
        case GgmlType::q2_k: y = q2_k(b); break;
        case GgmlType::q3_k: y = q3_k(b); break;
        case GgmlType::q4_k: y = q4_k(b, false); break;
        case GgmlType::q5_k: y = q4_k(b, true); break;
        case GgmlType::q6_k: y = q6_k(b); break;
        default: throw RuntimeError("GGML type " + ddo::store::ggml_type_label(type) + " has no decoder");  // decodable says otherwise
    }
    return y.reshape(shape);
}

void ggml_dequantize_into(const at::Tensor & blocks, std::uint32_t type, at::IntArrayRef shape, at::Tensor & out) {
    const auto t = static_cast<GgmlType>(type);
    if (blocks.is_cpu() && out.is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous() &&
        (t == GgmlType::q8_0 || t == GgmlType::q4_k)) {
        const auto b = blocks_of(blocks, type, shape);
        if (out.numel() != c10::multiply_integers(shape))
            throw RuntimeError("a decode buffer of " + std::to_string(out.numel()) + " elements for a tensor of " +
                               std::to_string(c10::multiply_integers(shape)));
        if (t == GgmlType::q8_0) host::q8_0(b, out);
        else host::q4_k(b, out);
        return;
    }
    out.copy_(ggml_dequantize(blocks, type, shape).view(out.sizes()));
}

}  // namespace ddo::torch::quant
