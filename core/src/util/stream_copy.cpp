// Note [Streaming copies] in docs/architecture.md: why the engine does not use memcpy for groups.
#include "ddo/util/stream_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define DDO_STREAM_COPY_SSE2 1
#endif

namespace ddo {

void stream_copy(void * dst, const void * src, std::size_t bytes) noexcept {
#if DDO_STREAM_COPY_SSE2
    constexpr std::size_t kMinBytes = std::size_t{1} << 20;
    if (bytes < kMinBytes) {
        std::memcpy(dst, src, bytes);
        return;
    }
    auto * d = static_cast<char *>(dst);
    const auto * s = static_cast<const char *>(src);
    // Head: up to the next 16-byte boundary of the destination (stores must be aligned; loads need not be).
    const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    const std::size_t body = bytes & ~std::size_t{63};
    auto * dv = reinterpret_cast<__m128i *>(d);
    const auto * sv = reinterpret_cast<const __m128i *>(s);
    for (std::size_t i = 0, n = body / 16; i < n; i += 4) {
        const __m128i a = _mm_loadu_si128(sv + i), b = _mm_loadu_si128(sv + i + 1);
        const __m128i c = _mm_loadu_si128(sv + i + 2), e = _mm_loadu_si128(sv + i + 3);
        _mm_stream_si128(dv + i, a);
        _mm_stream_si128(dv + i + 1, b);
        _mm_stream_si128(dv + i + 2, c);
        _mm_stream_si128(dv + i + 3, e);
    }
    _mm_sfence();  // non-temporal stores are weakly ordered: order them before whatever publishes the copy
    std::memcpy(d + body, s + body, bytes - body);
#else
    std::memcpy(dst, src, bytes);
#endif
}

}  // namespace ddo
