#include "run_signals.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <thread>

namespace ddo::host {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
std::atomic<int> g_count{0};
int g_pipe[2] = {-1, -1};
std::mutex g_flush_mu;
std::function<void(int)> g_flush;

// Async-signal-safe: atomics and write(2) only.
extern "C" void on_signal(int signo) {
    int expected = 0;
    g_signal.compare_exchange_strong(expected, signo);
    g_interrupted.store(true);
    g_count.fetch_add(1);
    const char b = char(signo);
    if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &b, 1);
}

void watch() {
    char b = 0;
    while (::read(g_pipe[0], &b, 1) >= 0 || errno == EINTR) {
        if (g_count.load() < 2) continue;
        const int signo = g_signal.load();
        {
            std::lock_guard lk(g_flush_mu);
            if (g_flush) {
                try {
                    g_flush(signo);
                } catch (...) {  // the process ends either way
                }
            }
        }
        ::_exit(128 + (signo ? signo : SIGINT));
    }
}

}  // namespace

void install_run_signals() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (::pipe2(g_pipe, O_CLOEXEC) != 0) g_pipe[0] = g_pipe[1] = -1;
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigset_t ours;
        sigemptyset(&ours);
        for (int s : {SIGINT, SIGTERM, SIGHUP}) {
            // An ignored SIGHUP (nohup) or SIGINT (a background job of a non-interactive shell) stays ignored, as
            // the parent asked; SIGTERM is always handled.
            struct sigaction old {};
            if (s != SIGTERM && ::sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
            ::sigaction(s, &sa, nullptr);
            sigaddset(&ours, s);
        }
        // A mask inherited blocked would hold the signals until the run ended: the ones handled are unblocked.
        ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
        if (g_pipe[0] >= 0) std::thread(watch).detach();
    });
}

std::atomic<bool> & run_interrupted() { return g_interrupted; }
int interrupting_signal() { return g_signal.load(); }

const char * signal_name(int signo) {
    switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

void set_second_signal_flush(std::function<void(int)> flush) {
    std::lock_guard lk(g_flush_mu);
    g_flush = std::move(flush);
}

}  // namespace ddo::host
