// Host staging routes: pinned allocation and registration of existing memory, separate limits and
// counters, no fallback from one to the other. Host backend (mlock) under label contract; the same
// source with DDO_STAGING_TEST_CUDA=1 runs on CUDA (cuMemHostAlloc / cuMemHostRegister) under cuda.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ddo/platform/host_staging.hpp"
#include "ddo/platform/linux_admission.hpp"
#include "sanitizers.hpp"

namespace {

using namespace ddo::platform;
constexpr std::uint64_t kMiB = 1ull << 20;

// VmLck of this process in bytes (what the kernel counts against RLIMIT_MEMLOCK).
std::uint64_t vm_locked() {
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        if (key == "VmLck:") {
            std::uint64_t kb = 0;
            status >> kb;
            return kb * 1024;
        }
    }
    return 0;
}

// Page-aligned memory owned by the test (an "existing" source buffer).
struct Source {
    explicit Source(std::uint64_t bytes) : bytes(bytes) {
        ptr = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        std::memset(ptr, 1, bytes);
    }
    ~Source() { ::munmap(ptr, bytes); }
    void * ptr;
    std::uint64_t bytes;
};

// What VmLck grows by when the host backend locks `bytes`. Under AddressSanitizer nothing: its interceptor turns
// mlock/munlock into no-ops that return 0 (Note [mlock under AddressSanitizer] in docs/validation.md), so the route
// succeeds and counts its bytes while the kernel locks none.
std::uint64_t locked_growth(std::uint64_t bytes) { return ddo::testing::kAddressSanitizer ? 0 : bytes; }

class Staging : public ::testing::TestWithParam<StagingBackend> {
protected:
    std::unique_ptr<HostStaging> make(StagingLimits limits, const LinuxAdmission * admission = nullptr) {
        std::string reason;
        auto s = HostStaging::create(GetParam(), limits, admission, &reason);
        if (!s && GetParam() == StagingBackend::cuda) {
            skip_reason = "no CUDA device: " + reason;
        }
        EXPECT_TRUE(s || GetParam() == StagingBackend::cuda) << reason;
        return s;
    }
    std::string skip_reason;
};

#define MAKE_OR_SKIP(var, ...)                          \
    auto var = make(__VA_ARGS__);                       \
    if (!var) {                                         \
        GTEST_SKIP() << skip_reason;                    \
    }

TEST_P(Staging, PinnedAllocationIsUsableAndCounted) {
    MAKE_OR_SKIP(staging, StagingLimits{});
    const std::uint64_t locked_before = vm_locked();
    {
        auto r = staging->allocate_pinned(1 * kMiB);
        ASSERT_TRUE(r.value) << r.reason;
        std::memset(r.value.data(), 7, r.value.size());
        EXPECT_EQ(static_cast<unsigned char *>(r.value.data())[kMiB - 1], 7);
        if (GetParam() == StagingBackend::host) {
            EXPECT_EQ(vm_locked() - locked_before, locked_growth(1 * kMiB));  // really locked (not under ASan)
        }
        const auto c = staging->pinned_counters();
        EXPECT_EQ(c.attempts, 1u);
        EXPECT_EQ(c.successes, 1u);
        EXPECT_EQ(c.bytes_current, 1 * kMiB);
        EXPECT_EQ(staging->registration_counters().attempts, 0u);
    }
    EXPECT_EQ(staging->pinned_counters().bytes_current, 0u);
    EXPECT_EQ(staging->pinned_counters().bytes_peak, 1 * kMiB);
    if (GetParam() == StagingBackend::host) {
        EXPECT_EQ(vm_locked(), locked_before);
    }
}

TEST_P(Staging, RegistrationOfExistingMemoryIsItsOwnRoute) {
    MAKE_OR_SKIP(staging, StagingLimits{});
    Source src(2 * kMiB);
    const std::uint64_t locked_before = vm_locked();
    {
        auto r = staging->register_range(src.ptr, src.bytes);
        ASSERT_TRUE(r.value) << r.reason;
        if (GetParam() == StagingBackend::host) {
            EXPECT_EQ(vm_locked() - locked_before, locked_growth(2 * kMiB));
        }
        EXPECT_EQ(staging->registration_counters().successes, 1u);
        EXPECT_EQ(staging->pinned_counters().attempts, 0u);
    }
    EXPECT_EQ(staging->registration_counters().bytes_current, 0u);
    EXPECT_EQ(static_cast<unsigned char *>(src.ptr)[0], 1);  // the memory stays the owner's
}

TEST_P(Staging, APinnedLimitRefusalSaysNothingAboutRegistration) {
    StagingLimits limits;
    limits.pinned_limit = 1 * kMiB;
    MAKE_OR_SKIP(staging, limits);
    auto pinned = staging->allocate_pinned(2 * kMiB);
    EXPECT_FALSE(pinned.value);
    EXPECT_NE(pinned.reason.find("pinned_limit"), std::string::npos) << pinned.reason;
    Source src(2 * kMiB);
    auto reg = staging->register_range(src.ptr, src.bytes);
    EXPECT_TRUE(reg.value) << reg.reason;
    const auto p = staging->pinned_counters();
    const auto r = staging->registration_counters();
    EXPECT_EQ(p.refusals, 1u);
    EXPECT_EQ(p.successes, 0u);
    EXPECT_EQ(r.successes, 1u);
    EXPECT_EQ(r.refusals + r.failures, 0u);
}

TEST_P(Staging, RegistrationOffSaysNothingAboutPinnedAllocation) {
    StagingLimits limits;
    limits.registration = RegistrationMode::off;
    MAKE_OR_SKIP(staging, limits);
    Source src(1 * kMiB);
    auto reg = staging->register_range(src.ptr, src.bytes);
    EXPECT_FALSE(reg.value);
    EXPECT_NE(reg.reason.find("registration = off"), std::string::npos) << reg.reason;
    auto pinned = staging->allocate_pinned(1 * kMiB);
    EXPECT_TRUE(pinned.value) << pinned.reason;
    EXPECT_EQ(staging->registration_counters().refusals, 1u);
    EXPECT_EQ(staging->pinned_counters().successes, 1u);
}

TEST_P(Staging, BoundedRegistrationHoldsItsCeiling) {
    StagingLimits limits;
    limits.registration = RegistrationMode::bounded;
    limits.registration_ceiling = 1 * kMiB;
    MAKE_OR_SKIP(staging, limits);
    Source a(kMiB / 2), b(3 * kMiB / 4);
    auto ra = staging->register_range(a.ptr, a.bytes);
    ASSERT_TRUE(ra.value) << ra.reason;
    auto rb = staging->register_range(b.ptr, b.bytes);
    EXPECT_FALSE(rb.value);
    EXPECT_NE(rb.reason.find("ceiling 1.0 MiB"), std::string::npos) << rb.reason;
    ra = {};  // unregister a
    rb = staging->register_range(b.ptr, b.bytes);
    EXPECT_TRUE(rb.value) << rb.reason;
}

TEST_P(Staging, BoundedWithoutACeilingIsAConfigurationError) {
    MAKE_OR_SKIP(usable, StagingLimits{});  // a cuda-labelled test without a device is a skip
    StagingLimits limits;
    limits.registration = RegistrationMode::bounded;
    std::string reason;
    EXPECT_EQ(HostStaging::create(GetParam(), limits, nullptr, &reason), nullptr);
    EXPECT_NE(reason.find("ceiling"), std::string::npos) << reason;
}

TEST_P(Staging, OverlappingRegistrationsAreRefused) {
    MAKE_OR_SKIP(staging, StagingLimits{});
    Source src(2 * kMiB);
    auto first = staging->register_range(src.ptr, kMiB);
    ASSERT_TRUE(first.value) << first.reason;
    auto second = staging->register_range(static_cast<char *>(src.ptr) + kMiB - 100, kMiB);
    EXPECT_FALSE(second.value);
    EXPECT_NE(second.reason.find("overlaps"), std::string::npos) << second.reason;
}

TEST_P(Staging, AdmissionRefusalStopsPinnedGrowthWithItsReason) {
    char tmpl[] = "/tmp/ddo-staging-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::filesystem::path root = tmpl;
    std::filesystem::create_directories(root / "proc/sys/vm");
    std::filesystem::create_directories(root / "proc/self");
    std::ofstream(root / "proc/sys/vm/overcommit_memory") << "0\n";
    std::ofstream(root / "proc/meminfo") << "MemAvailable: 1024 kB\nCommitLimit: 99999999 kB\nCommitted_AS: 1 kB\n";
    std::ofstream(root / "proc/self/status") << "VmSize: 1 kB\nVmLck: 0 kB\n";
    std::ofstream(root / "proc/self/cgroup") << "";
    const LinuxAdmission admission(AdmissionRoots{root / "proc", root / "sys"},
                                   [](int, std::string *) { return std::optional<std::uint64_t>(); });
    {
        MAKE_OR_SKIP(staging, StagingLimits{}, &admission);
        auto pinned = staging->allocate_pinned(4 * kMiB);
        EXPECT_FALSE(pinned.value);
        EXPECT_NE(pinned.reason.find("MemAvailable is 1.0 MiB"), std::string::npos) << pinned.reason;
        const auto j = staging->to_json();
        EXPECT_EQ(j["pinned"]["refusals"], 1);
        EXPECT_EQ(j["pinned"]["reasons"].size(), 1u);
        EXPECT_EQ(j["registration"]["attempts"], 0);
        EXPECT_EQ(j["limits"]["registration"], "full");
    }
    std::filesystem::remove_all(root);
}

std::string backend_name(const ::testing::TestParamInfo<StagingBackend> & info) { return to_string(info.param); }

#if DDO_STAGING_TEST_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, Staging, ::testing::Values(StagingBackend::cuda), backend_name);
#else
INSTANTIATE_TEST_SUITE_P(Host, Staging, ::testing::Values(StagingBackend::host), backend_name);

// RLIMIT_MEMLOCK is respected by our own check even where the kernel would let root exceed it.
TEST(HostStagingMemlock, BothRoutesRespectRlimitMemlock) {
    rlimit saved{};
    ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
    rlimit low = saved;
    low.rlim_cur = 256 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);
    std::string reason;
    auto staging = HostStaging::create(StagingBackend::host, StagingLimits{}, nullptr, &reason);
    ASSERT_TRUE(staging) << reason;
    auto pinned = staging->allocate_pinned(1 * kMiB);
    Source src(1 * kMiB);
    auto reg = staging->register_range(src.ptr, src.bytes);
    setrlimit(RLIMIT_MEMLOCK, &saved);
    EXPECT_FALSE(pinned.value);
    EXPECT_NE(pinned.reason.find("RLIMIT_MEMLOCK 0.2 MiB"), std::string::npos) << pinned.reason;
    // Each refusal suggests its own route's step (and raising the limit), never the other route's.
    EXPECT_NE(pinned.reason.find("ulimit -l"), std::string::npos) << pinned.reason;
    EXPECT_NE(pinned.reason.find("capacities.pin_host_memory = false"), std::string::npos) << pinned.reason;
    EXPECT_EQ(pinned.reason.find("host_registration"), std::string::npos) << pinned.reason;
    EXPECT_FALSE(reg.value);
    EXPECT_NE(reg.reason.find("RLIMIT_MEMLOCK"), std::string::npos) << reg.reason;
    EXPECT_NE(reg.reason.find("capacities.host_registration"), std::string::npos) << reg.reason;
    EXPECT_EQ(reg.reason.find("pin_host_memory"), std::string::npos) << reg.reason;
}
#endif

}  // namespace
