// CPU transport: one worker thread, FIFO. The compute thread is the caller, so compute_wait blocks it.
#include "ddo/engine/cpu_transport.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <time.h>

#include "ddo/engine/copy_queue.hpp"
#include "ddo/error.hpp"
#include "ddo/util/stream_copy.hpp"

namespace ddo::engine {

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_s() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

class CpuFence final : public Fence {
public:
    bool ready() const override { return done_.load(std::memory_order_acquire); }
    void host_wait() override {
        if (!ready()) {
            std::unique_lock lk(m_);
            cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire); });
        }
        if (err_) std::rethrow_exception(err_);
    }
    void complete(std::exception_ptr e) {
        {
            std::lock_guard lk(m_);
            err_ = std::move(e);
            done_.store(true, std::memory_order_release);
        }
        cv_.notify_all();
    }

private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::atomic<bool> done_{false};
    std::exception_ptr err_;
};

class CpuTransport final : public Transport {
public:
    CpuTransport() : worker_([this] { run(); }) {}
    ~CpuTransport() override {
        {
            std::lock_guard lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
    }

    std::string name() const override { return "cpu"; }
    bool device_is_host() const override { return true; }
    int device_ordinal() const override { return -1; }

    FencePtr submit(CopyJob job) override {
        auto f = std::make_shared<CpuFence>();
        {
            std::lock_guard lk(m_);
            q_.emplace_back(std::move(job), f);
            ++pending_;
        }
        cv_.notify_all();
        return f;
    }

    double compute_wait(Fence & f) override {
        if (f.ready()) { f.host_wait(); return 0.0; }
        auto t0 = Clock::now();
        f.host_wait();
        return std::chrono::duration<double>(Clock::now() - t0).count();
    }

    FencePtr compute_fence() override { return ready_fence(); }

    void drain() override {
        std::unique_lock lk(m_);
        idle_cv_.wait(lk, [&] { return pending_ == 0; });
    }

    TransportStats stats() const override {
        std::lock_guard lk(m_);
        TransportStats s = stats_;
        s.event_reason = "CPU transport: no device events (the copy time is upload_copy_s)";
        return s;
    }

    HostBuffer allocate_host(std::uint64_t bytes, bool pinned) override {
        // The host stands in for pinned memory: page-aligned memory, touched now so the first copy
        // does not pay the page faults (pinned memory is resident too).
        HostBuffer b = HostBuffer::pageable(bytes, 4096);
        if (pinned) {
            std::memset(b.data(), 0, static_cast<std::size_t>(bytes));
            void * p = b.data();
            return HostBuffer(p, bytes, true, [keep = std::make_shared<HostBuffer>(std::move(b))](void *) mutable { keep.reset(); });
        }
        return b;
    }

    // The CPU transport's "link" is a host memory copy, with stream_copy as the worker does it.
    double time_link_copy(void * dst, const void * src, std::uint64_t bytes) override {
        const auto t0 = Clock::now();
        stream_copy(dst, src, static_cast<std::size_t>(bytes));
        return std::chrono::duration<double>(Clock::now() - t0).count();
    }

    Capacities observe_device() const override {
        Capacities c = Capacities::observe_host();
        c.device_free = c.usable_host_ram();
        c.device_total = c.mem_available;
        c.device_source = "host memory, the CPU transport's device: " + c.describe_host_ram();
        return c;
    }

private:
    void run() {
        for (;;) {
            auto item = next_copy_job(m_, cv_, q_, stop_);
            if (!item) return;
            auto & [job, fence] = *item;
            std::exception_ptr err;
            double fill_s = 0;
            auto t0 = Clock::now();
            const double cpu0 = thread_cpu_s();
            try {
                if (job.slot_free) job.slot_free->host_wait();
                if (job.fill && !job.staging) {  // the destination is host memory: read the file straight into it
                    auto f0 = Clock::now();
                    job.fill(job.dst);
                    fill_s = std::chrono::duration<double>(Clock::now() - f0).count();
                } else if (job.fill) {
                    if (job.staging_free) job.staging_free->host_wait();
                    auto f0 = Clock::now();
                    job.fill(job.staging);
                    fill_s = std::chrono::duration<double>(Clock::now() - f0).count();
                    stream_copy(job.dst, job.staging, static_cast<std::size_t>(job.bytes));
                } else {
                    stream_copy(job.dst, job.src, static_cast<std::size_t>(job.bytes));
                }
            } catch (const std::exception & e) {
                err = std::make_exception_ptr(RuntimeError("upload of group '" + job.group_name + "' failed: " + e.what()));
            } catch (...) {
                err = std::make_exception_ptr(RuntimeError("upload of group '" + job.group_name + "' failed"));
            }
            const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
            const double cpu = thread_cpu_s() - cpu0;
            {
                std::lock_guard lk(m_);
                stats_.copy_s += dt;
                stats_.copy_cpu_s += cpu;
                stats_.fill_s += fill_s;
                ++stats_.jobs;
                if (err) ++stats_.failures;
            }
            fence->complete(err);
            {
                std::lock_guard lk(m_);
                --pending_;
            }
            idle_cv_.notify_all();
        }
    }

    mutable std::mutex m_;
    std::condition_variable cv_, idle_cv_;
    std::deque<std::pair<CopyJob, std::shared_ptr<CpuFence>>> q_;
    std::size_t pending_ = 0;
    bool stop_ = false;
    TransportStats stats_;
    std::thread worker_;  // last: started after the state above exists
};

}  // namespace

std::unique_ptr<Transport> make_cpu_transport() { return std::make_unique<CpuTransport>(); }

}  // namespace ddo::engine
