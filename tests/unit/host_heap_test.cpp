// platform::release_free_heap_pages and HeapReleaseTotals (Note [Host heap between pieces]): on glibc, heap blocks
// freed below a live one stay in RSS until released; the release hands their pages back and says how much RSS left.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "ddo/platform/host_heap.hpp"

TEST(HostHeap, FreedHeapBlocksLeaveRssOnlyWhenReleased) {
#if !defined(__GLIBC__)
    GTEST_SKIP() << "not glibc: release_free_heap_pages does nothing here";
#endif
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer's allocator serves malloc (and quarantines what is freed): glibc's heap, which "
                    "release_free_heap_pages trims, is not the one in use";
#endif
    // 160 MiB in 64 KiB blocks (below glibc's initial 128 KiB mmap threshold: they come from the heap), touched, then
    // freed except a block allocated after them, which pins the arena's top so that free() cannot trim it.
    constexpr std::size_t kBlock = 64 << 10, kBlocks = 2560;
    std::vector<void *> blocks;
    for (std::size_t i = 0; i < kBlocks; ++i) {
        blocks.push_back(std::malloc(kBlock));
        ASSERT_NE(blocks.back(), nullptr);
        std::memset(blocks.back(), 1, kBlock);
    }
    void * pin = std::malloc(kBlock);
    std::memset(pin, 1, kBlock);
    for (void * b : blocks) std::free(b);
    const auto r = ddo::platform::release_free_heap_pages();
    std::free(pin);
    ASSERT_TRUE(r.supported) << r.reason;
    ASSERT_TRUE(r.rss_drop_bytes.has_value()) << r.reason;
    // Nearly all of the 160 MiB (the block headers' pages and the neighbours' stay).
    EXPECT_GT(*r.rss_drop_bytes, std::int64_t(120) << 20) << "RSS dropped by " << *r.rss_drop_bytes << " bytes";
}

TEST(HostHeap, TotalsSumTheDropsAndSayWhatIsUnknown) {
    ddo::platform::HeapReleaseTotals t;
    t.add({true, 100, ""});
    t.add({true, 300, ""});
    t.add({true, -50, ""});  // another thread allocated meanwhile: a measure, summed as seen
    auto j = t.json();
    EXPECT_EQ(j.at("releases"), 3);
    EXPECT_EQ(j.at("rss_drop_bytes"), 350);
    EXPECT_EQ(j.at("largest_rss_drop_bytes"), 300);
    t.add({true, std::nullopt, "statm unreadable"});
    j = t.json();
    EXPECT_EQ(j.at("releases"), 4);
    EXPECT_TRUE(j.at("rss_drop_bytes").is_null());
    EXPECT_EQ(j.at("rss_drop_reason"), "statm unreadable");
    ddo::platform::HeapReleaseTotals none;
    none.add({false, std::nullopt, "not glibc"});
    EXPECT_EQ(none.json(), (nlohmann::json{{"supported", false}, {"reason", "not glibc"}}));
}
