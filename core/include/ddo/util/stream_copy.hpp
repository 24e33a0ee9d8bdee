// Bulk copies whose destination the CPU does not read again soon: a weight group into its slot or
// resident buffer, pageable host memory into a pinned chunk for the DMA engine.
#pragma once

#include <cstddef>

namespace ddo {

// Copies `bytes` from `src` to `dst` (non-overlapping). Copies of at least 1 MiB on x86-64 use
// non-temporal stores, which skip the read-for-ownership of every destination line and keep the
// copy from evicting the compute thread's cache (Note [Streaming copies] in docs/architecture.md);
// smaller copies and other CPUs use memcpy. The stores are fenced before it returns, so a release
// store that follows (a fence completing) publishes them.
void stream_copy(void * dst, const void * src, std::size_t bytes) noexcept;

}  // namespace ddo
