// stream_copy: every byte in [dst, dst + n) equals the source and nothing outside it is written,
// for sizes around the non-temporal threshold and every alignment of source and destination.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ddo/util/stream_copy.hpp"

namespace {

void check_copy(std::size_t bytes, std::size_t dst_off, std::size_t src_off) {
    constexpr std::size_t kGuard = 64;
    std::vector<unsigned char> src(bytes + src_off + kGuard);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>((i * 131u + 7u) ^ (i >> 11));
    std::vector<unsigned char> dst(bytes + dst_off + 2 * kGuard, 0xA5);
    ddo::stream_copy(dst.data() + kGuard + dst_off, src.data() + src_off, bytes);
    for (std::size_t i = 0; i < kGuard + dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << "byte " << i << " before the destination was written";
    for (std::size_t i = 0; i < bytes; ++i)
        ASSERT_EQ(dst[kGuard + dst_off + i], src[src_off + i]) << "byte " << i << " of " << bytes << " (dst+" << dst_off << ", src+" << src_off << ")";
    for (std::size_t i = kGuard + dst_off + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5) << "byte " << i << " after the destination was written";
}

TEST(StreamCopy, SmallCopiesAreExact) {
    for (std::size_t n : {0u, 1u, 15u, 16u, 63u, 64u, 4097u}) check_copy(n, 3, 5);
}

TEST(StreamCopy, LargeCopiesAreExactAtEveryAlignment) {
    const std::size_t mib = std::size_t{1} << 20;
    for (std::size_t n : {mib, mib + 1, mib + 63, 3 * mib + 17})
        for (std::size_t d : {0u, 1u, 8u, 15u})
            for (std::size_t s : {0u, 3u, 16u}) check_copy(n, d, s);
}

}  // namespace
