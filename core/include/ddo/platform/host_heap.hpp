// The C heap's free pages handed back to the kernel between the pieces of a long computation (the tiles and windows
// of a VAE decode), so that what one piece freed does not stay in RSS while the next runs. glibc's malloc keeps freed
// heap blocks resident: it returns only an arena's top, and after a large block is freed it raises its mmap threshold
// (to at most 32 MiB) so that later blocks of that size come from the heap too. Over the hundreds of tiles of a video
// decode the arena grew by fragments no later request fit, and RSS with it. Note [Host heap between pieces] in
// docs/architecture.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddo::platform {

// What one release did. `rss_drop_bytes` is RSS before minus after the release (statm), so it includes what other
// threads allocated or freed meanwhile: the effect seen, not the allocator's own count.
struct HeapRelease {
    bool supported = false;                      // false: not glibc; nothing was done (`reason` says so)
    std::optional<std::int64_t> rss_drop_bytes;  // nullopt when RSS could not be read (`reason`)
    std::string reason;
};

// glibc: malloc_trim(0), which returns every arena's whole free pages (madvise MADV_DONTNEED); what is in use stays.
HeapRelease release_free_heap_pages();

// The releases of one phase, summed.
class HeapReleaseTotals {
public:
    void add(const HeapRelease & r);
    // {"releases": n, "rss_drop_bytes": sum, "largest_rss_drop_bytes": max} (both null with "rss_drop_reason" when
    // RSS was unreadable), or {"supported": false, "reason": ...}.
    nlohmann::json json() const;

private:
    std::int64_t releases_ = 0, drop_sum_ = 0, drop_max_ = 0;
    bool supported_ = true, drops_known_ = true;
    std::string reason_;
};

}  // namespace ddo::platform
