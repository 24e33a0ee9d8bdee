// Note [Host decode kernels] in docs/architecture.md. Built with -ffp-contract=off (core/CMakeLists.txt): a fused
// multiply-add would round once where the reference rounds twice.
#include "host_kernels.hpp"

#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ddo::torch::quant::host {

namespace {

constexpr int64_t kGrainBlocks = 4096;  // blocks per parallel task: ~128 K elements

float half_at(const std::uint8_t * p) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, p, 2);  // little-endian in the file, as on every host ddo builds for
    return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

// A decoded block (n floats, a multiple of 4, computed into `t`) written to `o`. The decoded weight is larger than the
// caches and read once by the matmul after it: on x86 a streaming store skips reading `o`'s lines in first (about a
// third of the decode's time on the bench). `t` is 16-byte aligned; `o` when every block of the tensor is (checked
// by the caller: `stream`).
inline void put_block(float * o, const float * t, int n, bool stream) {
#if defined(__SSE2__)
    if (stream) {
        for (int j = 0; j < n; j += 4) _mm_stream_ps(o + j, _mm_load_ps(t + j));
        return;
    }
#endif
    (void)stream;
    std::memcpy(o, t, std::size_t(n) * sizeof(float));
}

// Streaming stores are weakly ordered: made visible before the chunk's thread finishes.
inline void end_stores() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

bool aligned16(const float * p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <typename F8>
std::array<float, 256> fp8_table() {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[std::size_t(b)] = static_cast<float>(F8(std::uint8_t(b), F8::from_bits()));
    return t;
}

}  // namespace

void q8_0(const at::Tensor & blocks, at::Tensor & out) {
    const auto * b = blocks.const_data_ptr<std::uint8_t>();
    float * y = out.mutable_data_ptr<float>();
    const bool stream = aligned16(y);  // 32 floats a block: every block aligned when the first is
    at::parallel_for(0, blocks.numel() / 34, kGrainBlocks, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
            const std::uint8_t * blk = b + i * 34;
            const float d = half_at(blk);
            std::int8_t q[32];  // local copies: no store aliases them, so the loop vectorises
            std::memcpy(q, blk + 2, 32);
            alignas(16) float t[32];
            for (int j = 0; j < 32; ++j) t[j] = float(q[j]) * d;
            put_block(y + i * 32, t, 32, stream);
        }
        end_stores();
    });
}

void q4_k(const at::Tensor & blocks, at::Tensor & out) {
    const auto * b = blocks.const_data_ptr<std::uint8_t>();
    float * y = out.mutable_data_ptr<float>();
    const bool stream = aligned16(y);
    at::parallel_for(0, blocks.numel() / 144, kGrainBlocks / 8, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
            const std::uint8_t * blk = b + i * 144;
            const float d = half_at(blk), dmin = half_at(blk + 2);
            const std::uint8_t * s = blk + 4;  // 12 bytes: d[4], m[4], md[4] (6-bit scales and mins of 8 sub-blocks)
            float ds[8], dm[8];
            for (int j = 0; j < 4; ++j) {
                ds[j] = d * float(s[j] & 0x3F);
                dm[j] = dmin * float(s[4 + j] & 0x3F);
                ds[4 + j] = d * float((s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30));
                dm[4 + j] = dmin * float((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
            }
            const std::uint8_t * qs = blk + 16;
            float * o = y + i * 256;
            for (int c = 0; c < 4; ++c) {  // byte group c: sub-block 2c in the low nibbles, 2c + 1 in the high ones
                std::uint8_t q[32];
                std::memcpy(q, qs + 32 * c, 32);
                alignas(16) float t[64];  // sub-block 2c, then 2c + 1
                const float d0 = ds[2 * c], m0 = dm[2 * c], d1 = ds[2 * c + 1], m1 = dm[2 * c + 1];
                for (int k = 0; k < 32; ++k) {
                    t[k] = float(q[k] & 0x0F) * d0 - m0;
                    t[32 + k] = float(q[k] >> 4) * d1 - m1;
                }
                put_block(o + 64 * c, t, 64, stream);
            }
        }
        end_stores();
    });
}

void fp8(const at::Tensor & q, const at::Tensor & scale, at::Tensor & out) {
    static const auto e4m3 = fp8_table<c10::Float8_e4m3fn>();
    static const auto e5m2 = fp8_table<c10::Float8_e5m2>();
    const auto & table = q.scalar_type() == at::kFloat8_e5m2 ? e5m2 : e4m3;
    const auto * x = static_cast<const std::uint8_t *>(q.const_data_ptr());
    float * y = out.mutable_data_ptr<float>();
    const int64_t rows = q.dim() == 0 ? 1 : q.size(0), cols = rows ? q.numel() / rows : 0;
    const float * s = scale.defined() ? scale.const_data_ptr<float>() : nullptr;
    const bool per_row = s && scale.numel() > 1;
    at::parallel_for(0, rows, std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(cols, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            const std::uint8_t * xr = x + r * cols;
            float * yr = y + r * cols;
            if (!s) {
                for (int64_t k = 0; k < cols; ++k) yr[k] = table[xr[k]];
                continue;
            }
            const float sr = s[per_row ? r : 0];
            for (int64_t k = 0; k < cols; ++k) yr[k] = table[xr[k]] * sr;
        }
    });
}

void sdnq_rows(const at::Tensor & q, bool packed, float offset, const at::Tensor & scale, const at::Tensor & zero,
               at::Tensor & out) {
    const auto * x = static_cast<const std::uint8_t *>(q.const_data_ptr());  // int8 read through its bytes, below
    float * y = out.mutable_data_ptr<float>();
    const float * s = scale.const_data_ptr<float>();
    const float * z = zero.defined() ? zero.const_data_ptr<float>() : nullptr;
    const int64_t rows = out.size(0), cols = out.size(1);
    const bool is_signed = q.scalar_type() == at::kChar;
    at::parallel_for(0, rows, std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(cols, 1)), [&](int64_t lo, int64_t hi) {
        std::vector<float> v(static_cast<std::size_t>(cols));
        for (int64_t r = lo; r < hi; ++r) {
            float * yr = y + r * cols;
            if (packed) {
                const std::uint8_t * xr = x + r * cols / 2;
                for (int64_t k = 0; k < cols / 2; ++k) {
                    v[std::size_t(2 * k)] = float(xr[k] & 0x0F) + offset;
                    v[std::size_t(2 * k + 1)] = float(xr[k] >> 4) + offset;
                }
            } else if (is_signed) {
                const auto * xr = reinterpret_cast<const std::int8_t *>(x) + r * cols;
                for (int64_t k = 0; k < cols; ++k) v[std::size_t(k)] = float(xr[k]);
            } else {
                const std::uint8_t * xr = x + r * cols;
                for (int64_t k = 0; k < cols; ++k) v[std::size_t(k)] = float(xr[k]);
            }
            const float sr = s[r];
            if (z) {
                const float zr = z[r];
                // ATen's CPU addcmul is one fused multiply-add (one rounding): so is this.
                for (int64_t k = 0; k < cols; ++k) yr[k] = std::fma(v[std::size_t(k)], sr, zr);
            } else {
                for (int64_t k = 0; k < cols; ++k) yr[k] = v[std::size_t(k)] * sr;
            }
        }
    });
}

}  // namespace ddo::torch::quant::host
