// Linux admission on fake /proc and /sys trees (and once on the real machine). Every refusal names
// the observation or limit that caused it.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ddo/engine/capacities.hpp"
#include "ddo/platform/linux_admission.hpp"

namespace fs = std::filesystem;
using ddo::platform::AdmissionRoots;
using ddo::platform::GrowthKind;
using ddo::platform::GrowthRequest;
using ddo::platform::GrowthRoute;
using ddo::platform::LinuxAdmission;
using ddo::platform::Observation;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

// A fake machine: 16 GiB available, mode 0, cgroup v2 without a limit, unlimited rlimits.
class FakeTree : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/ddo-admission-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root = tmpl;
        write("proc/sys/vm/overcommit_memory", "0\n");
        meminfo(32 * kGiB, 2 * kGiB, 16 * kGiB);
        write("proc/self/status", "Name:\ttest\nVmSize:\t  102400 kB\nVmLck:\t       0 kB\n");
        write("proc/self/cgroup", "0::/user.slice/job\n");
        write("sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
        write("sys/fs/cgroup/user.slice/memory.max", "max\n");
        write("sys/fs/cgroup/user.slice/memory.current", "1000\n");
        write("sys/fs/cgroup/user.slice/job/memory.max", "max\n");
        write("sys/fs/cgroup/user.slice/job/memory.current", "1000\n");
    }
    void TearDown() override { fs::remove_all(root); }

    void write(const std::string & rel, const std::string & text) {
        fs::create_directories((root / rel).parent_path());
        std::ofstream(root / rel) << text;
    }
    void meminfo(std::uint64_t commit_limit, std::uint64_t committed, std::uint64_t available) {
        write("proc/meminfo", "MemTotal:       33554432 kB\nMemAvailable:   " + std::to_string(available / 1024) +
                                  " kB\nCommitLimit:    " + std::to_string(commit_limit / 1024) +
                                  " kB\nCommitted_AS:   " + std::to_string(committed / 1024) + " kB\n");
    }
    LinuxAdmission admission() const {
        return LinuxAdmission(AdmissionRoots{root / "proc", root / "sys"}, [this](int resource, std::string * error) {
            if (rlimit_error) {
                *error = "getrlimit failed: injected";
                return std::optional<std::uint64_t>();
            }
            return resource == RLIMIT_MEMLOCK ? memlock : address_space;
        });
    }
    static GrowthRequest request(std::uint64_t bytes, GrowthKind kind = GrowthKind::commit) {
        return GrowthRequest{bytes, kind, 0, "pinned staging"};
    }

    fs::path root;
    std::optional<std::uint64_t> memlock;        // nullopt = unlimited
    std::optional<std::uint64_t> address_space;  // nullopt = unlimited
    bool rlimit_error = false;
};

TEST_F(FakeTree, AdmitsWhenEveryObservationIsKnownAndLarge) {
    const auto obs = admission().observe();
    EXPECT_EQ(obs.overcommit_mode.value, 0u);
    EXPECT_EQ(obs.mem_available.value, 16 * kGiB);
    EXPECT_EQ(obs.committed_as.value, 2 * kGiB);
    EXPECT_EQ(obs.cgroup_version, "v2");
    EXPECT_EQ(obs.cgroup_memory_max.state, Observation::State::unlimited);
    EXPECT_EQ(obs.vm_size.value, 100 * kMiB);
    const auto d = admission().admit(request(1 * kGiB));
    EXPECT_TRUE(d.admitted) << d.reason;
}

TEST_F(FakeTree, OvercommitMode2WithALowCommitLimitRefuses) {
    write("proc/sys/vm/overcommit_memory", "2\n");
    meminfo(3 * kGiB, 2500 * kMiB, 16 * kGiB);
    const auto d = admission().admit(request(1 * kGiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("vm.overcommit_memory = 2"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("CommitLimit 3072.0 MiB"), std::string::npos) << d.reason;
    EXPECT_TRUE(admission().admit(request(256 * kMiB)).admitted);
}

TEST_F(FakeTree, OvercommitMode0DoesNotEnforceTheCommitLimit) {
    meminfo(1 * kGiB, 2 * kGiB, 16 * kGiB);
    EXPECT_TRUE(admission().admit(request(1 * kGiB)).admitted);
}

TEST_F(FakeTree, ACgroupV2LimitBelowTheRequestRefuses) {
    write("sys/fs/cgroup/user.slice/job/memory.max", std::to_string(2 * kGiB) + "\n");
    write("sys/fs/cgroup/user.slice/job/memory.current", std::to_string(1 * kGiB) + "\n");
    const auto d = admission().admit(request(1500 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("cgroup v2 limit 2048.0 MiB"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("job/memory.max"), std::string::npos) << d.reason;
    EXPECT_TRUE(admission().admit(request(512 * kMiB)).admitted);
}

TEST_F(FakeTree, TheTightestAncestorCgroupBinds) {
    write("sys/fs/cgroup/user.slice/memory.max", std::to_string(1 * kGiB) + "\n");
    write("sys/fs/cgroup/user.slice/memory.current", std::to_string(900 * kMiB) + "\n");
    const auto obs = admission().observe();
    EXPECT_EQ(obs.cgroup_memory_max.value, 1 * kGiB);
    EXPECT_EQ(obs.cgroup_path, (root / "sys/fs/cgroup/user.slice").string());
    EXPECT_FALSE(admission().admit(request(200 * kMiB)).admitted);
}

TEST_F(FakeTree, CgroupV1IsTheFallbackWhenV2HasNoMemoryController) {
    write("sys/fs/cgroup/cgroup.controllers", "");  // hybrid: v2 mounted without memory
    write("proc/self/cgroup", "4:memory:/docker/abc\n0::/\n");
    write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(1 * kGiB) + "\n");
    write("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(512 * kMiB) + "\n");
    const auto obs = admission().observe();
    EXPECT_EQ(obs.cgroup_version, "v1");
    EXPECT_EQ(obs.cgroup_memory_max.value, 1 * kGiB);
    const auto d = admission().admit(request(768 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("cgroup v1 limit"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, CgroupV1UnlimitedValueAndInvisiblePathUseTheMountRoot) {
    write("sys/fs/cgroup/cgroup.controllers", "");
    write("proc/self/cgroup", "4:memory:/not/in/this/namespace\n");
    write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    write("sys/fs/cgroup/memory/memory.usage_in_bytes", "4745625600\n");
    const auto obs = admission().observe();
    EXPECT_EQ(obs.cgroup_version, "v1");
    EXPECT_EQ(obs.cgroup_memory_max.state, Observation::State::unlimited);
    EXPECT_NE(obs.cgroup_memory_max.source.find("not visible"), std::string::npos) << obs.cgroup_memory_max.source;
    EXPECT_TRUE(admission().admit(request(1 * kGiB)).admitted);
}

TEST_F(FakeTree, AnUnreadableFileRefusesGrowthWithItsReason) {
    fs::remove(root / "proc/sys/vm/overcommit_memory");
    fs::create_directories(root / "proc/sys/vm/overcommit_memory");  // read() fails with EISDIR
    const auto d = admission().admit(request(1 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("vm.overcommit_memory is unknown"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("Is a directory"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("unknown observations refuse growth"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, AMissingMeminfoRefuses) {
    fs::remove(root / "proc/meminfo");
    const auto d = admission().admit(request(1 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("MemAvailable is unknown"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("No such file"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, AnUnreadableCgroupLimitRefuses) {
    fs::remove(root / "sys/fs/cgroup/user.slice/job/memory.max");
    fs::create_directories(root / "sys/fs/cgroup/user.slice/job/memory.max");
    const auto d = admission().admit(request(1 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("cgroup memory limit is unknown"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, AnUnreadableProcSelfCgroupRefuses) {
    fs::remove(root / "proc/self/cgroup");
    const auto d = admission().admit(request(1 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_EQ(admission().observe().cgroup_version, "unknown");
}

TEST_F(FakeTree, MemAvailableBelowRequestPlusHeadroomRefuses) {
    meminfo(32 * kGiB, 1 * kGiB, 3 * kGiB);
    GrowthRequest r = request(2 * kGiB);
    r.headroom = 2 * kGiB;
    const auto d = admission().admit(r);
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("MemAvailable is 3072.0 MiB"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, RlimitMemlockBoundsLockedGrowthOnly) {
    memlock = 64 * kMiB;
    write("proc/self/status", "VmSize:\t  102400 kB\nVmLck:\t   32768 kB\n");
    EXPECT_TRUE(admission().admit(request(48 * kMiB, GrowthKind::commit)).admitted);
    const auto d = admission().admit(request(48 * kMiB, GrowthKind::locked));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("RLIMIT_MEMLOCK 64.0 MiB"), std::string::npos) << d.reason;
    EXPECT_TRUE(admission().admit(request(16 * kMiB, GrowthKind::locked)).admitted);
}

// The next step a refusal suggests is the refused route's own (seed 000: separate routes, separate limits):
// never the registration setting for a pinned allocation, nor the pinned budget for a registration; raising
// RLIMIT_MEMLOCK is offered to both when it was the limit.
TEST_F(FakeTree, RefusalHintNamesTheRefusedRoute) {
    memlock = 64 * kMiB;
    write("proc/self/status", "VmSize:\t  102400 kB\nVmLck:\t   32768 kB\n");
    GrowthRequest r = request(48 * kMiB, GrowthKind::locked);
    r.route = GrowthRoute::pinned;
    const auto pinned = admission().admit(r);
    ASSERT_FALSE(pinned.admitted);
    EXPECT_NE(pinned.reason.find("ulimit -l"), std::string::npos) << pinned.reason;
    EXPECT_NE(pinned.reason.find("capacities.pinned_host_budget_gb"), std::string::npos) << pinned.reason;
    EXPECT_NE(pinned.reason.find("capacities.pin_host_memory = false"), std::string::npos) << pinned.reason;
    EXPECT_EQ(pinned.reason.find("host_registration"), std::string::npos) << pinned.reason;
    EXPECT_EQ(pinned.reason.find("ceiling"), std::string::npos) << pinned.reason;

    r.route = GrowthRoute::registration;
    const auto reg = admission().admit(r);
    ASSERT_FALSE(reg.admitted);
    EXPECT_NE(reg.reason.find("ulimit -l"), std::string::npos) << reg.reason;
    EXPECT_NE(reg.reason.find("capacities.host_registration = \"bounded\""), std::string::npos) << reg.reason;
    EXPECT_NE(reg.reason.find("host_registration_ceiling_gb"), std::string::npos) << reg.reason;
    EXPECT_EQ(reg.reason.find("pinned_host_budget_gb"), std::string::npos) << reg.reason;
    EXPECT_EQ(reg.reason.find("pin_host_memory"), std::string::npos) << reg.reason;

    // MemAvailable (not RLIMIT_MEMLOCK) binds: no ulimit advice, the pinned route's own step.
    meminfo(32 * kGiB, 1 * kGiB, 3 * kGiB);
    memlock.reset();
    GrowthRequest big = request(4 * kGiB, GrowthKind::locked);
    big.route = GrowthRoute::pinned;
    const auto mem = admission().admit(big);
    ASSERT_FALSE(mem.admitted);
    EXPECT_NE(mem.reason.find("MemAvailable"), std::string::npos) << mem.reason;
    EXPECT_EQ(mem.reason.find("ulimit"), std::string::npos) << mem.reason;
    EXPECT_NE(mem.reason.find("capacities.pin_host_memory = false"), std::string::npos) << mem.reason;
    EXPECT_EQ(mem.reason.find("host_registration"), std::string::npos) << mem.reason;
}

TEST_F(FakeTree, RlimitAsBoundsTheProcess) {
    address_space = 1 * kGiB;
    const auto d = admission().admit(request(1 * kGiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("RLIMIT_AS"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, AnUnreadableRlimitRefuses) {
    rlimit_error = true;
    const auto d = admission().admit(request(1 * kMiB));
    EXPECT_FALSE(d.admitted);
    EXPECT_NE(d.reason.find("RLIMIT_AS is unknown"), std::string::npos) << d.reason;
}

TEST_F(FakeTree, ObservationsGoToJsonWithUnknownAsNullNeverZero) {
    fs::remove(root / "proc/meminfo");
    const auto j = admission().observe().to_json();
    EXPECT_EQ(j["mem_available"]["state"], "unknown");
    EXPECT_TRUE(j["mem_available"]["value"].is_null());
    EXPECT_TRUE(j["mem_available"].contains("error"));
    EXPECT_EQ(j["overcommit_mode"]["value"], 0);
    EXPECT_EQ(j["cgroup"]["version"], "v2");
    const auto d = admission().admit(request(1 * kMiB)).to_json();
    EXPECT_EQ(d["admitted"], false);
}

TEST(LinuxAdmissionOnThisMachine, ObservesProcAndAdmitsASmallRequest) {
    const LinuxAdmission admission;
    const auto obs = admission.observe();
    EXPECT_FALSE(obs.overcommit_mode.is_unknown()) << obs.overcommit_mode.error;
    EXPECT_FALSE(obs.mem_available.is_unknown()) << obs.mem_available.error;
    const auto d = admission.admit(GrowthRequest{1 * kMiB, GrowthKind::commit, 0, "test"});
    EXPECT_TRUE(d.admitted) << d.reason << "\n" << obs.to_json().dump(2);
}

}  // namespace

// The planner's host capacity comes from the same observation as admission (issue 16 item 5): the process's own
// cgroup, v2 or v1, the tightest ancestor; an unknown limit is unknown, never "unlimited".
TEST_F(FakeTree, PlannerCapacitiesSeeTheProcessesOwnCgroupLikeAdmission) {
    using ddo::engine::Capacities;
    const AdmissionRoots roots{root / "proc", root / "sys"};
    // No limit anywhere: MemAvailable.
    auto c = Capacities::observe_host(roots);
    EXPECT_EQ(c.cgroup_version, "v2");
    EXPECT_FALSE(c.cgroup_limit.has_value());
    EXPECT_EQ(c.usable_host_ram(), 16 * kGiB);
    // A limit on an ancestor of the process's cgroup (not the root's memory.max, which the planner used to read).
    write("sys/fs/cgroup/user.slice/memory.max", std::to_string(3 * kGiB) + "\n");
    write("sys/fs/cgroup/user.slice/memory.current", std::to_string(1 * kGiB) + "\n");
    c = Capacities::observe_host(roots);
    EXPECT_EQ(c.cgroup_limit, 3 * kGiB);
    EXPECT_EQ(c.cgroup_path, (root / "sys/fs/cgroup/user.slice").string());
    EXPECT_EQ(c.usable_host_ram(), 2 * kGiB) << "limit minus usage, below MemAvailable";
    // v1 (hybrid mount without the v2 memory controller).
    write("sys/fs/cgroup/cgroup.controllers", "");
    write("proc/self/cgroup", "4:memory:/docker/abc\n0::/\n");
    write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(1 * kGiB) + "\n");
    write("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(256 * kMiB) + "\n");
    c = Capacities::observe_host(roots);
    EXPECT_EQ(c.cgroup_version, "v1");
    EXPECT_EQ(c.usable_host_ram(), 768 * kMiB);
    // An unreadable limit: unknown, so the planner refuses host growth (nullopt), and the report says why.
    fs::remove(root / "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes");
    fs::create_directories(root / "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes");
    c = Capacities::observe_host(roots);
    EXPECT_TRUE(c.cgroup_limit_unknown);
    EXPECT_FALSE(c.usable_host_ram().has_value());
    const auto j = c.to_json();
    EXPECT_TRUE(j["cgroup_limit"].is_null());
    EXPECT_NE(j["cgroup_limit_reason"].get<std::string>().find("memory cgroup limit unknown"), std::string::npos) << j.dump();
}
