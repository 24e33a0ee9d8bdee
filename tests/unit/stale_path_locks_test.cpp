// ddo::remove_stale_path_locks (core/include/ddo/util/stale_path_locks.hpp): a lock whose holder died without releasing
// it (a child that _exits with the lock taken, as SIGKILL leaves it) is removed and its holder reported; a lock a live
// process holds (another process, or this one) is left; a nested directory is searched.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/util/path_lock.hpp"
#include "ddo/util/stale_path_locks.hpp"

namespace fs = std::filesystem;

namespace {

class StalePathLocksTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ddo_stale_locks_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "jobs" / "a");
    }
    void TearDown() override { fs::remove_all(dir_); }

    // A child that takes the lock on `target` and, when `die` is set, dies with it taken (its destructor never runs:
    // the file stays, as after SIGKILL); otherwise it holds it until killed. Returns the child's pid once it holds it.
    pid_t child_holding(const fs::path & target, bool die) {
        int fds[2];
        EXPECT_EQ(::pipe(fds), 0);
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            auto * lock = new ddo::PathLock(ddo::PathLock::acquire(target, "output"));  // never destroyed
            (void)lock;
            (void)!::write(fds[1], "x", 1);
            if (die) ::_exit(0);
            for (;;) ::pause();
        }
        ::close(fds[1]);
        char c = 0;
        EXPECT_EQ(::read(fds[0], &c, 1), 1);
        ::close(fds[0]);
        if (die) ::waitpid(pid, nullptr, 0);
        return pid;
    }

    fs::path dir_;
};

TEST_F(StalePathLocksTest, ADeadHoldersLockIsRemovedALiveOneIsKept) {
    const fs::path dead_target = dir_ / "jobs" / "a" / "image.png", live_target = dir_ / "jobs" / "a" / "report.json";
    const pid_t dead = child_holding(dead_target, true);
    const pid_t live = child_holding(live_target, false);
    const auto own = ddo::PathLock::acquire(dir_ / "serve", "state directory");
    const fs::path dead_lock = dir_ / "jobs" / "a" / ".image.png.ddo-lock", live_lock = dir_ / "jobs" / "a" / ".report.json.ddo-lock",
                   own_lock = dir_ / ".serve.ddo-lock";
    ASSERT_TRUE(fs::exists(dead_lock)) << "the child that died left no lock file: nothing to test";

    const auto removed = ddo::remove_stale_path_locks(dir_);
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0].file, dead_lock);
    EXPECT_EQ(removed[0].holder, "pid " + std::to_string(dead));
    EXPECT_FALSE(fs::exists(dead_lock));
    EXPECT_TRUE(fs::exists(live_lock)) << "a lock another live process holds was removed";
    EXPECT_TRUE(fs::exists(own_lock)) << "a lock this process holds was removed";

    // The live holder killed: its lock is stale now; the target can be locked again.
    ::kill(live, SIGKILL);
    ::waitpid(live, nullptr, 0);
    const auto second = ddo::remove_stale_path_locks(dir_);
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0].file, live_lock);
    EXPECT_FALSE(fs::exists(live_lock));
    EXPECT_NO_THROW((void)ddo::PathLock::acquire(live_target, "output"));
    EXPECT_TRUE(fs::exists(own_lock));
}

TEST_F(StalePathLocksTest, AMissingDirectoryIsNoError) {
    EXPECT_TRUE(ddo::remove_stale_path_locks(dir_ / "no_such_dir").empty());
}

}  // namespace
