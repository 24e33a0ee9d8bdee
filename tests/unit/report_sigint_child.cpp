// Test helper for run_report_host_test: a tracked run that blocks in a phase until SIGINT, then
// records the interruption and writes the report (exit 130), the way `ddo-host` does.
// Usage: ddo_report_sigint_child REPORT_PATH
#include <csignal>
#include <cstdio>
#include <atomic>
#include <thread>

#include "ddo/report/run_tracker.hpp"

namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }
}  // namespace

int main(int argc, char ** argv) {
    if (argc != 2) return 2;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    ddo::RunTrackerOptions o;
    o.report_path = argv[1];
    o.sample_interval = std::chrono::milliseconds(10);
    ddo::RunTracker tracker(o);
    auto phase = tracker.phase("denoise");
    std::printf("ready\n");
    std::fflush(stdout);
    for (int i = 0; i < 1000 && !g_interrupted.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!g_interrupted.load()) {
        tracker.mark_failed(4, "no SIGINT arrived within 10 s");
        tracker.write();
        return 4;
    }
    tracker.mark_interrupted();
    tracker.write();
    return 130;
}
