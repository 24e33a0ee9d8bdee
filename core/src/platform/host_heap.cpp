// release_free_heap_pages and HeapReleaseTotals (host_heap.hpp). Note [Host heap between pieces].
#include "ddo/platform/host_heap.hpp"

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "ddo/report/memory_probes.hpp"

namespace ddo::platform {

HeapRelease release_free_heap_pages() {
    HeapRelease r;
#if defined(__GLIBC__)
    const auto before = report::read_rss_statm("/proc");
    malloc_trim(0);
    const auto after = report::read_rss_statm("/proc");
    r.supported = true;
    if (before.bytes && after.bytes) r.rss_drop_bytes = std::int64_t(*before.bytes) - std::int64_t(*after.bytes);
    else r.reason = before.bytes ? after.reason : before.reason;
#else
    r.reason = "not glibc: this C library's malloc has no malloc_trim";
#endif
    return r;
}

void HeapReleaseTotals::add(const HeapRelease & r) {
    if (!r.supported) {
        supported_ = false;
        reason_ = r.reason;
        return;
    }
    ++releases_;
    if (!r.rss_drop_bytes) {
        drops_known_ = false;
        reason_ = r.reason;
        return;
    }
    drop_sum_ += *r.rss_drop_bytes;
    drop_max_ = std::max(drop_max_, *r.rss_drop_bytes);
}

nlohmann::json HeapReleaseTotals::json() const {
    if (!supported_) return {{"supported", false}, {"reason", reason_}};
    nlohmann::json j = {{"releases", releases_}};
    if (drops_known_) {
        j["rss_drop_bytes"] = drop_sum_;
        j["largest_rss_drop_bytes"] = drop_max_;
    } else {
        j["rss_drop_bytes"] = nullptr;
        j["largest_rss_drop_bytes"] = nullptr;
        j["rss_drop_reason"] = reason_;
    }
    return j;
}

}  // namespace ddo::platform
