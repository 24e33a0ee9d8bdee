// The vmm allocator contract, run through the plugin's C ABI on one backend per build of this file:
// the host backend under label "contract" (tests/contract/vmm_tests.cmake) and the CUDA backend under
// label "cuda" (tests/cuda/vmm_tests.cmake, DDO_VMM_TEST_CUDA=1), which skips with the reason when no
// CUDA device is usable. Payloads are checked with XXH3 over bytes read back from the buffer.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/build_info.h"

#if DDO_HAVE_CUDA_HEADERS
#include "ddo/platform/cuda_driver.hpp"
#endif

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::string g_last_error;
void record_error(void *, int32_t, const char * msg) { g_last_error = msg; }
void ignore_log(void *, int32_t, const char *, const char *) {}
const ddo_host_api kHost{sizeof(ddo_host_api), DDO_ABI_VERSION_MINOR, nullptr, ignore_log, record_error};

// The plugin, dlopen()ed once from the build tree (what the registry does after verification).
struct Plugin {
    void * handle = nullptr;
    const ddo_allocator_vtable * vt = nullptr;
    ddo_plugin_negotiate_fn negotiate = nullptr;
    std::string error;
    static const Plugin & get() {
        static Plugin p = [] {
            Plugin out;
            const std::string path = std::string(DDO_BINARY_DIR) + "/lib/ddo/plugins/libddo_allocator_vmm.so";
            out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (out.handle == nullptr) {
                out.error = dlerror();
                return out;
            }
            out.negotiate = reinterpret_cast<ddo_plugin_negotiate_fn>(dlsym(out.handle, DDO_PLUGIN_NEGOTIATE_SYMBOL));
            auto get_vtable = reinterpret_cast<ddo_plugin_get_vtable_fn>(dlsym(out.handle, DDO_PLUGIN_GET_VTABLE_SYMBOL));
            if (get_vtable != nullptr) {
                out.vt = static_cast<const ddo_allocator_vtable *>(get_vtable(&kHost));
            }
            return out;
        }();
        return p;
    }
};

// Writes and reads payloads where the buffer lives: host memory or device memory (driver copies).
struct PayloadIo {
    ddo_alloc_backend backend;
    void write(void * ptr, std::uint64_t bytes, std::uint64_t seed) const {
        std::vector<std::uint8_t> data(bytes);
        std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
        for (auto & b : data) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            b = static_cast<std::uint8_t>(x);
        }
        if (backend == DDO_ALLOC_BACKEND_HOST) {
            std::memcpy(ptr, data.data(), bytes);
            return;
        }
#if DDO_HAVE_CUDA_HEADERS
        const auto * d = ddo::platform::CudaDriver::get(nullptr);
        ASSERT_EQ(d->api().memcpy_htod(reinterpret_cast<CUdeviceptr>(ptr), data.data(), bytes), CUDA_SUCCESS);
#endif
    }
    std::uint64_t checksum(const void * ptr, std::uint64_t bytes) const {
        if (backend == DDO_ALLOC_BACKEND_HOST) {
            return XXH3_64bits(ptr, bytes);
        }
        std::vector<std::uint8_t> data(bytes);
#if DDO_HAVE_CUDA_HEADERS
        const auto * d = ddo::platform::CudaDriver::get(nullptr);
        EXPECT_EQ(d->api().memcpy_dtoh(data.data(), reinterpret_cast<CUdeviceptr>(ptr), bytes), CUDA_SUCCESS);
#endif
        return XXH3_64bits(data.data(), bytes);
    }
    static std::uint64_t expected(std::uint64_t bytes, std::uint64_t seed) {
        std::vector<std::uint8_t> data(bytes);
        std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
        for (auto & b : data) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            b = static_cast<std::uint8_t>(x);
        }
        return XXH3_64bits(data.data(), bytes);
    }
};

class VmmContract : public ::testing::TestWithParam<ddo_alloc_backend> {
protected:
    void SetUp() override {
        const Plugin & p = Plugin::get();
        ASSERT_NE(p.vt, nullptr) << "cannot load the vmm plugin: " << p.error;
        vt = p.vt;
        io.backend = GetParam();
        if (GetParam() == DDO_ALLOC_BACKEND_CUDA) {
            ddo_alloc_pool * probe = nullptr;
            const ddo_status s = create(&probe, 8 * kMiB, 24 * kMiB, {});
            if (s != DDO_STATUS_OK) {
                GTEST_SKIP() << "no CUDA device: " << g_last_error;
            }
            ASSERT_EQ(vt->pool_close(probe), DDO_STATUS_OK);
        }
    }
    void TearDown() override {
        if (pool != nullptr) {
            for (auto id : ids_to_unflag) {
                vt->set_flags(pool, id, 0);
            }
            EXPECT_EQ(vt->pool_close(pool), DDO_STATUS_OK) << g_last_error;
        }
    }
    ddo_status create(ddo_alloc_pool ** out, std::uint64_t physical, std::uint64_t virtual_limit,
                      std::vector<ddo_kv> options) {
        ddo_alloc_config cfg{};
        cfg.struct_size = sizeof(cfg);
        cfg.backend = GetParam();
        cfg.device = 0;
        cfg.physical_limit = physical;
        cfg.virtual_limit = virtual_limit;
        cfg.options = options.empty() ? nullptr : options.data();
        cfg.n_options = options.size();
        g_last_error.clear();
        return vt->pool_create(&cfg, out);
    }
    void open_gate_pool(std::vector<ddo_kv> options = {}) {
        ASSERT_EQ(create(&pool, 8 * kMiB, 24 * kMiB, std::move(options)), DDO_STATUS_OK) << g_last_error;
    }
    ddo_alloc_stats stats() const {
        ddo_alloc_stats s{};
        s.struct_size = sizeof(s);
        EXPECT_EQ(vt->get_stats(pool, &s), DDO_STATUS_OK);
        return s;
    }
    ddo_alloc_buffer reserve(std::uint64_t bytes, std::uint64_t alignment = 256) {
        ddo_alloc_buffer b{};
        EXPECT_EQ(vt->reserve(pool, bytes, alignment, &b), DDO_STATUS_OK) << g_last_error;
        return b;
    }

    const ddo_allocator_vtable * vt = nullptr;
    ddo_alloc_pool * pool = nullptr;
    PayloadIo io{};
    std::vector<std::uint64_t> ids_to_unflag;
};

TEST_P(VmmContract, NegotiatesAsAllocatorWithTheBuildFingerprint) {
    ddo_plugin_info info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(Plugin::get().negotiate(DDO_ABI_VERSION_MAJOR, DDO_ABI_VERSION_MINOR, &info), DDO_STATUS_OK);
    EXPECT_EQ(info.kind, static_cast<uint32_t>(DDO_PLUGIN_KIND_ALLOCATOR));
    EXPECT_STREQ(info.name, "vmm");
    EXPECT_STREQ(info.build_fingerprint, DDO_BUILD_FINGERPRINT);
    EXPECT_GE(vt->struct_size, sizeof(ddo_allocator_vtable));
    EXPECT_NE(vt->reclaim, nullptr);
    EXPECT_NE(vt->recreate, nullptr);
}

TEST_P(VmmContract, ReservesAlignedBuffersWithinTheLimitsAndCountsThem) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(3 * kMiB + 1, 1 * kMiB);
    EXPECT_NE(a.id, b.id);
    EXPECT_GE(a.bytes, 4 * kMiB);
    EXPECT_GE(b.bytes, 3 * kMiB + 1);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.ptr) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.ptr) % kMiB, 0u);
    const auto s = stats();
    EXPECT_EQ(s.backend, static_cast<uint32_t>(GetParam()));
    EXPECT_EQ(s.live_buffers, 2u);
    EXPECT_EQ(s.physical_bytes, a.bytes + b.bytes);
    EXPECT_EQ(s.virtual_bytes, a.bytes + b.bytes);
    EXPECT_EQ(s.bytes_in_use, a.bytes + b.bytes);
    EXPECT_EQ(s.reserves, 2u);
    EXPECT_EQ(s.failures, 0u);
}

// The seed's gate: two 4 MiB buffers, 8 MiB physical / 24 MiB virtual, one reclaim + recreation at
// the same address, exact payloads.
TEST_P(VmmContract, ReclaimAndRecreateKeepTheAddressAndTheOtherPayload) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    io.write(a.ptr, a.bytes, 1);
    io.write(b.ptr, b.bytes, 2);
    ASSERT_EQ(vt->reclaim(pool, b.id), DDO_STATUS_OK) << g_last_error;
    auto s = stats();
    EXPECT_EQ(s.physical_bytes, a.bytes);
    EXPECT_EQ(s.virtual_bytes, a.bytes + b.bytes);
    EXPECT_EQ(s.reclaims, 1u);
    EXPECT_EQ(s.live_buffers, 2u);
    EXPECT_EQ(io.checksum(a.ptr, a.bytes), PayloadIo::expected(a.bytes, 1));
    ASSERT_EQ(vt->recreate(pool, b.id), DDO_STATUS_OK) << g_last_error;
    // Recreation backs the same address; the content is undefined, so upload again and verify.
    io.write(b.ptr, b.bytes, 3);
    EXPECT_EQ(io.checksum(b.ptr, b.bytes), PayloadIo::expected(b.bytes, 3));
    EXPECT_EQ(io.checksum(a.ptr, a.bytes), PayloadIo::expected(a.bytes, 1));
    s = stats();
    EXPECT_EQ(s.physical_bytes, a.bytes + b.bytes);
    EXPECT_EQ(s.recreates, 1u);
    EXPECT_EQ(s.failures, 0u);
    EXPECT_EQ(s.quarantines, 0u);
}

TEST_P(VmmContract, LeasedAndPendingBuffersRefuseReleaseReclaimAndClose) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    ids_to_unflag = {a.id, b.id};
    ASSERT_EQ(vt->set_flags(pool, a.id, DDO_ALLOC_FLAG_LEASED), DDO_STATUS_OK);
    ASSERT_EQ(vt->set_flags(pool, b.id, DDO_ALLOC_FLAG_PENDING), DDO_STATUS_OK);
    EXPECT_EQ(stats().leased_buffers, 1u);
    EXPECT_EQ(stats().pending_buffers, 1u);
    EXPECT_EQ(vt->release(pool, a.id), DDO_STATUS_BUSY);
    EXPECT_NE(g_last_error.find("leased"), std::string::npos) << g_last_error;
    EXPECT_EQ(vt->reclaim(pool, a.id), DDO_STATUS_BUSY);
    EXPECT_EQ(vt->release(pool, b.id), DDO_STATUS_BUSY);
    EXPECT_NE(g_last_error.find("pending"), std::string::npos) << g_last_error;
    EXPECT_EQ(vt->reclaim(pool, b.id), DDO_STATUS_BUSY);
    EXPECT_EQ(vt->pool_close(pool), DDO_STATUS_BUSY);  // checked close: the pool is still there
    auto s = stats();
    EXPECT_EQ(s.refusals, 5u);
    EXPECT_EQ(s.live_buffers, 2u);
    EXPECT_EQ(s.physical_bytes, a.bytes + b.bytes);
    ASSERT_EQ(vt->set_flags(pool, a.id, 0), DDO_STATUS_OK);
    ASSERT_EQ(vt->set_flags(pool, b.id, 0), DDO_STATUS_OK);
    EXPECT_EQ(stats().leased_buffers, 0u);
    EXPECT_EQ(stats().pending_buffers, 0u);
    EXPECT_EQ(vt->release(pool, a.id), DDO_STATUS_OK);
    EXPECT_EQ(vt->reclaim(pool, b.id), DDO_STATUS_OK);
}

TEST_P(VmmContract, PhysicalLimitRefusesGrowthWithTheLimitNamed) {
    open_gate_pool();
    reserve(4 * kMiB);
    reserve(4 * kMiB);
    ddo_alloc_buffer c{};
    EXPECT_EQ(vt->reserve(pool, 4 * kMiB, 256, &c), DDO_STATUS_OUT_OF_MEMORY);
    EXPECT_NE(g_last_error.find("physical_limit"), std::string::npos) << g_last_error;
    const auto s = stats();
    EXPECT_EQ(s.ooms, 1u);
    EXPECT_EQ(s.failures, 0u);  // a refusal by policy is not a failed driver call
    EXPECT_EQ(s.physical_bytes, 8 * kMiB);
    EXPECT_EQ(s.virtual_bytes, 8 * kMiB);
}

TEST_P(VmmContract, VirtualLimitRefusesGrowthWithTheLimitNamed) {
    open_gate_pool();
    reserve(4 * kMiB);
    ddo_alloc_buffer c{};
    EXPECT_EQ(vt->reserve(pool, 22 * kMiB, 256, &c), DDO_STATUS_OUT_OF_MEMORY);
    EXPECT_NE(g_last_error.find("virtual_limit"), std::string::npos) << g_last_error;
    EXPECT_EQ(stats().virtual_bytes, 4 * kMiB);
}

TEST_P(VmmContract, ReleasedBuffersAreCachedAndReusedAtTheSameAddress) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    ASSERT_EQ(vt->release(pool, a.id), DDO_STATUS_OK);
    auto s = stats();
    EXPECT_EQ(s.live_buffers, 0u);
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.physical_bytes, a.bytes);  // idle cache
    const auto again = reserve(4 * kMiB);
    EXPECT_EQ(again.ptr, a.ptr);
    EXPECT_NE(again.id, a.id);  // ids are never reused
    EXPECT_EQ(stats().physical_bytes, a.bytes);
}

TEST_P(VmmContract, TrimIdleReturnsIdleBackingAndKeepsLivePayloads) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    io.write(a.ptr, a.bytes, 7);
    std::uint64_t released = 123;
    ASSERT_EQ(vt->trim_idle(pool, &released), DDO_STATUS_OK);
    EXPECT_EQ(released, 0u);  // nothing idle: live buffers are never trimmed
    ASSERT_EQ(vt->release(pool, b.id), DDO_STATUS_OK);
    ASSERT_EQ(vt->trim_idle(pool, &released), DDO_STATUS_OK);
    EXPECT_EQ(released, b.bytes);
    const auto s = stats();
    EXPECT_EQ(s.physical_bytes, a.bytes);
    EXPECT_EQ(s.virtual_bytes, a.bytes);
    EXPECT_EQ(s.trims, 1u);
    EXPECT_EQ(s.trimmed_bytes, b.bytes);
    EXPECT_EQ(io.checksum(a.ptr, a.bytes), PayloadIo::expected(a.bytes, 7));
    const auto c = reserve(4 * kMiB);  // allocation works after trim
    io.write(c.ptr, c.bytes, 8);
    EXPECT_EQ(io.checksum(c.ptr, c.bytes), PayloadIo::expected(c.bytes, 8));
}

TEST_P(VmmContract, GrowthTrimsTheIdleCacheBeforeRefusing) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    ASSERT_EQ(vt->release(pool, b.id), DDO_STATUS_OK);
    const auto c = reserve(2 * kMiB);  // 4 live + 4 idle + 2 > 8: the idle 4 MiB goes first
    EXPECT_NE(c.ptr, nullptr);
    const auto s = stats();
    EXPECT_EQ(s.trims, 1u);
    EXPECT_EQ(s.physical_bytes, a.bytes + c.bytes);
}

TEST_P(VmmContract, ReclaimedBufferCannotBeLeasedUntilRecreated) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    ASSERT_EQ(vt->reclaim(pool, a.id), DDO_STATUS_OK);
    EXPECT_EQ(vt->set_flags(pool, a.id, DDO_ALLOC_FLAG_LEASED), DDO_STATUS_INVALID_ARGUMENT);
    ASSERT_EQ(vt->recreate(pool, a.id), DDO_STATUS_OK);
    EXPECT_EQ(vt->set_flags(pool, a.id, DDO_ALLOC_FLAG_LEASED), DDO_STATUS_OK);
    EXPECT_EQ(vt->set_flags(pool, a.id, 0), DDO_STATUS_OK);
}

TEST_P(VmmContract, RecreateBeyondThePhysicalLimitIsRefused) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    ASSERT_EQ(vt->reclaim(pool, a.id), DDO_STATUS_OK);
    reserve(4 * kMiB);
    reserve(4 * kMiB);
    EXPECT_EQ(vt->recreate(pool, a.id), DDO_STATUS_OUT_OF_MEMORY);
    EXPECT_NE(g_last_error.find("physical_limit"), std::string::npos) << g_last_error;
}

TEST_P(VmmContract, BadArgumentsAreRefusedWithAReason) {
    open_gate_pool();
    ddo_alloc_buffer b{};
    EXPECT_EQ(vt->reserve(pool, 0, 256, &b), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(vt->reserve(pool, kMiB, 300, &b), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(vt->release(pool, 999), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(g_last_error.find("999"), std::string::npos);
    EXPECT_EQ(vt->set_flags(pool, 999, 0), DDO_STATUS_INVALID_ARGUMENT);
    const auto a = reserve(kMiB);
    EXPECT_EQ(vt->set_flags(pool, a.id, 4), DDO_STATUS_INVALID_ARGUMENT);
    ddo_alloc_stats small{};
    small.struct_size = 0;
    EXPECT_EQ(vt->get_stats(pool, &small), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(vt->pool_close(nullptr), DDO_STATUS_INVALID_ARGUMENT);
    ddo_alloc_pool * other = nullptr;
    EXPECT_EQ(create(&other, 0, 0, {{"no_such_option", "1"}}), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(g_last_error.find("no_such_option"), std::string::npos) << g_last_error;
    EXPECT_EQ(other, nullptr);
}

TEST_P(VmmContract, StatsOfAnOlderCallerGetThePrefixItKnows) {
    open_gate_pool();
    reserve(4 * kMiB);
    ddo_alloc_stats s{};
    s.struct_size = offsetof(ddo_alloc_stats, bytes_in_use);
    s.bytes_in_use = 42;
    ASSERT_EQ(vt->get_stats(pool, &s), DDO_STATUS_OK);
    EXPECT_EQ(s.physical_bytes, 4 * kMiB);
    EXPECT_EQ(s.bytes_in_use, 42u);  // beyond the caller's struct: untouched
}

TEST_P(VmmContract, FailedMapIsRolledBackAndCounted) {
    open_gate_pool({{"fault.map", "1"}});
    ddo_alloc_buffer b{};
    EXPECT_EQ(vt->reserve(pool, 4 * kMiB, 256, &b), DDO_STATUS_UNAVAILABLE);
    EXPECT_NE(g_last_error.find("injected fault in map"), std::string::npos) << g_last_error;
    const auto s = stats();
    EXPECT_EQ(s.failures, 1u);
    EXPECT_EQ(s.quarantines, 0u);
    EXPECT_EQ(s.physical_bytes, 0u);
    EXPECT_EQ(s.virtual_bytes, 0u);
    EXPECT_EQ(s.live_buffers, 0u);
    reserve(4 * kMiB);  // the next map succeeds
}

TEST_P(VmmContract, ChunkWhoseReleaseFailedIsQuarantinedAndRetriedAtClose) {
    open_gate_pool({{"fault.release_chunk", "1"}});
    const auto a = reserve(4 * kMiB);
    EXPECT_EQ(vt->reclaim(pool, a.id), DDO_STATUS_UNAVAILABLE);
    auto s = stats();
    EXPECT_EQ(s.failures, 1u);
    EXPECT_EQ(s.quarantines, 1u);
    EXPECT_EQ(s.reclaims, 1u);              // the address is unbacked ...
    EXPECT_EQ(s.physical_bytes, a.bytes);   // ... but the chunk still counts as held
    ASSERT_EQ(vt->recreate(pool, a.id), DDO_STATUS_OK) << g_last_error;  // 4 quarantined + 4 <= 8
    EXPECT_EQ(stats().physical_bytes, 2 * a.bytes);
    EXPECT_EQ(vt->pool_close(pool), DDO_STATUS_OK) << g_last_error;  // the retry succeeds
    pool = nullptr;
}

TEST_P(VmmContract, CheckedCloseLeavesNoOwnersBehind) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    ASSERT_EQ(vt->release(pool, a.id), DDO_STATUS_OK);
    ASSERT_EQ(vt->reclaim(pool, b.id), DDO_STATUS_OK);
    ASSERT_EQ(vt->release(pool, b.id), DDO_STATUS_OK);
    ASSERT_EQ(vt->trim_idle(pool, nullptr), DDO_STATUS_OK);
    const auto s = stats();
    EXPECT_EQ(s.live_buffers, 0u);
    EXPECT_EQ(s.leased_buffers, 0u);
    EXPECT_EQ(s.pending_buffers, 0u);
    EXPECT_EQ(s.physical_bytes, 0u);
    EXPECT_EQ(s.virtual_bytes, 0u);
    EXPECT_EQ(s.failures, 0u);
    EXPECT_EQ(s.quarantines, 0u);
    EXPECT_EQ(vt->pool_close(pool), DDO_STATUS_OK);
    pool = nullptr;
}

std::string backend_name(const ::testing::TestParamInfo<ddo_alloc_backend> & info) {
    return info.param == DDO_ALLOC_BACKEND_CUDA ? "cuda" : "host";
}

#if DDO_VMM_TEST_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, VmmContract, ::testing::Values(DDO_ALLOC_BACKEND_CUDA), backend_name);
#else
INSTANTIATE_TEST_SUITE_P(Host, VmmContract, ::testing::Values(DDO_ALLOC_BACKEND_HOST), backend_name);

// Host-only observations of the kernel: the backing really is returned.

// Sum of allocated bytes (st_blocks) of this process's vmm memfds ("/memfd:ddo-vmm-pool-N").
std::uint64_t memfd_allocated_bytes() {
    std::uint64_t total = 0;
    DIR * dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
        return 0;
    }
    while (dirent * e = readdir(dir)) {
        const std::string link = std::string("/proc/self/fd/") + e->d_name;
        char target[256] = {};
        const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
        if (n > 0 && std::string(target, n).find("memfd:ddo-vmm-pool-") != std::string::npos) {
            struct stat st {};
            if (stat(link.c_str(), &st) == 0) {
                total += static_cast<std::uint64_t>(st.st_blocks) * 512;
            }
        }
    }
    closedir(dir);
    return total;
}

using VmmHostBackend = VmmContract;
INSTANTIATE_TEST_SUITE_P(Host, VmmHostBackend, ::testing::Values(DDO_ALLOC_BACKEND_HOST), backend_name);

TEST_P(VmmHostBackend, HolePunchingReturnsPagesToTheKernel) {
    const std::uint64_t before = memfd_allocated_bytes();
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    const auto b = reserve(4 * kMiB);
    io.write(a.ptr, a.bytes, 1);
    io.write(b.ptr, b.bytes, 2);
    EXPECT_EQ(memfd_allocated_bytes() - before, 8 * kMiB);
    ASSERT_EQ(vt->reclaim(pool, b.id), DDO_STATUS_OK);
    EXPECT_EQ(memfd_allocated_bytes() - before, 4 * kMiB);
    ASSERT_EQ(vt->release(pool, a.id), DDO_STATUS_OK);
    EXPECT_EQ(memfd_allocated_bytes() - before, 4 * kMiB);  // idle cache keeps it
    ASSERT_EQ(vt->trim_idle(pool, nullptr), DDO_STATUS_OK);
    EXPECT_EQ(memfd_allocated_bytes() - before, 0u);
    ASSERT_EQ(vt->recreate(pool, b.id), DDO_STATUS_OK);
    EXPECT_EQ(memfd_allocated_bytes() - before, 4 * kMiB);
}

TEST_P(VmmHostBackend, ReclaimedAddressStaysReservedAndInaccessible) {
    open_gate_pool();
    const auto a = reserve(4 * kMiB);
    ASSERT_EQ(vt->reclaim(pool, a.id), DDO_STATUS_OK);
    // The range is still ours (PROT_NONE): /proc/self/maps lists it with ---p.
    FILE * maps = fopen("/proc/self/maps", "r");
    ASSERT_NE(maps, nullptr);
    char line[512];
    bool found = false;
    const auto start = reinterpret_cast<std::uintptr_t>(a.ptr);
    while (fgets(line, sizeof(line), maps) != nullptr) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = {};
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= start && start + a.bytes <= hi) {
            found = std::string(perms).substr(0, 3) == "---";
        }
    }
    fclose(maps);
    EXPECT_TRUE(found) << "reclaimed range is not a PROT_NONE reservation";
    EXPECT_DEATH({ *static_cast<volatile char *>(a.ptr) = 1; }, "");
}

TEST(VmmBackendChoice, AutoPicksCudaWhenUsableElseHost) {
    const Plugin & p = Plugin::get();
    ASSERT_NE(p.vt, nullptr) << p.error;
    ddo_alloc_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.backend = DDO_ALLOC_BACKEND_AUTO;
    ddo_alloc_pool * pool = nullptr;
    ASSERT_EQ(p.vt->pool_create(&cfg, &pool), DDO_STATUS_OK) << g_last_error;
    ddo_alloc_stats s{};
    s.struct_size = sizeof(s);
    ASSERT_EQ(p.vt->get_stats(pool, &s), DDO_STATUS_OK);
    ddo_alloc_pool * cuda = nullptr;
    cfg.backend = DDO_ALLOC_BACKEND_CUDA;
    const bool cuda_usable = p.vt->pool_create(&cfg, &cuda) == DDO_STATUS_OK;
    if (cuda != nullptr) {
        EXPECT_EQ(p.vt->pool_close(cuda), DDO_STATUS_OK);
    }
    EXPECT_EQ(s.backend, static_cast<uint32_t>(cuda_usable ? DDO_ALLOC_BACKEND_CUDA : DDO_ALLOC_BACKEND_HOST));
    EXPECT_EQ(p.vt->pool_close(pool), DDO_STATUS_OK);
}

TEST(VmmBackendChoice, ExplicitCudaWithoutADeviceIsUnavailableWithAReason) {
    const Plugin & p = Plugin::get();
    ASSERT_NE(p.vt, nullptr) << p.error;
    ddo_alloc_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.backend = DDO_ALLOC_BACKEND_CUDA;
    ddo_alloc_pool * pool = nullptr;
    g_last_error.clear();
    const ddo_status s = p.vt->pool_create(&cfg, &pool);
    if (s == DDO_STATUS_OK) {
        EXPECT_EQ(p.vt->pool_close(pool), DDO_STATUS_OK);
        GTEST_SKIP() << "a CUDA device is usable here; this test covers machines without one";
    }
    EXPECT_EQ(s, DDO_STATUS_UNAVAILABLE);
    EXPECT_EQ(pool, nullptr);
    EXPECT_FALSE(g_last_error.empty());
    std::cout << "reason: " << g_last_error << "\n";
}
#endif

}  // namespace
