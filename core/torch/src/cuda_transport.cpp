// The CUDA transport (ddo/torch/cuda_transport.hpp) over ATen's stream/event API.
//
//   submit()  -> FIFO -> one copy worker (host thread):
//                  copy stream waits on the slot's readers fence (cudaStreamWaitEvent, no host wait)
//                  page-locked source (job.host_locked: cudaHostAlloc'd, HostStaging's pinned route, or
//                  pageable memory HostStaging registered): one cudaMemcpyAsync of the whole group
//                  pageable      : memcpy into a ring of pinned chunks, cudaMemcpyAsync per chunk
//                  file          : fill(staging) then one cudaMemcpyAsync of the group when the staging
//                                  buffer is page-locked, else through the pinned chunks (a pinned fallback)
//                  records the upload's event on the copy stream -> the fence becomes "enqueued"
//   compute_wait(f) -> the current (compute) stream waits on f's event; the host waits at most for
//                      the worker to have *enqueued* the copy, never for the copy itself
//   compute_fence() -> an event recorded on the current stream: completes when the kernels that read
//                      the slot complete; the next copy into that slot waits on it on the copy stream
//
// Every upload also records a timing event before its copy; stats() sums the completed pairs
// (upload_event_s), separately from the worker's host time (upload_copy_s).
#include "ddo/torch/cuda_transport.hpp"

#include <ATen/ATen.h>

#if __has_include(<ATen/cuda/CUDAEvent.h>) && __has_include(<cuda_runtime_api.h>)
#define DDO_TORCH_HAS_CUDA 1
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#else
#define DDO_TORCH_HAS_CUDA 0
#endif

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ddo/engine/copy_queue.hpp"
#include "ddo/error.hpp"
#include "ddo/util/stream_copy.hpp"

namespace ddo::torch {

#if DDO_TORCH_HAS_CUDA

namespace {

using Clock = std::chrono::steady_clock;
using engine::CopyJob;
using engine::next_copy_job;
using engine::Fence;
using engine::FencePtr;
using engine::HostBuffer;
using Event = at::cuda::CUDAEvent;
using EventPtr = std::shared_ptr<Event>;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

void check(cudaError_t e, const char * what) {
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw RuntimeError(std::string(what) + " failed (" + cuda_error(e) + ")");
    }
}

// A fence backed by a CUDA event. Upload fences are created at submit and become "enqueued" when the
// copy worker has recorded the event on the copy stream (or failed); compute fences are enqueued at
// construction.
class CudaFence final : public Fence {
public:
    CudaFence() = default;
    explicit CudaFence(EventPtr recorded) : ev_(std::move(recorded)), enqueued_(true) {}

    bool ready() const override {
        std::lock_guard lk(m_);
        if (!enqueued_) return false;
        return err_ || !ev_ || ev_->query();
    }
    void host_wait() override {
        EventPtr ev = wait_enqueued(nullptr);
        if (ev) ev->synchronize();
    }
    // Orders `stream` after this fence. The host waits only until the event exists (the worker has
    // enqueued the copy); returns the seconds it waited for that.
    double block(const c10::cuda::CUDAStream & stream) {
        double waited = 0;
        EventPtr ev = wait_enqueued(&waited);
        if (ev) ev->block(stream);
        return waited;
    }
    void set_enqueued(EventPtr ev, std::exception_ptr err) {
        {
            std::lock_guard lk(m_);
            ev_ = std::move(ev);
            err_ = std::move(err);
            enqueued_ = true;
        }
        cv_.notify_all();
    }

private:
    EventPtr wait_enqueued(double * waited) {
        std::unique_lock lk(m_);
        if (!enqueued_) {
            const auto t0 = Clock::now();
            cv_.wait(lk, [&] { return enqueued_; });
            if (waited) *waited = since(t0);
        }
        if (err_) std::rethrow_exception(err_);
        return ev_;
    }

    mutable std::mutex m_;
    std::condition_variable cv_;
    EventPtr ev_;
    bool enqueued_ = false;
    std::exception_ptr err_;
};

// Orders `stream` after f: a CUDA fence through the stream, any other fence (tests, ready_fence) by
// waiting on the host. Returns the host seconds spent.
double order_after(Fence & f, const c10::cuda::CUDAStream & stream) {
    if (auto * cf = dynamic_cast<CudaFence *>(&f)) return cf->block(stream);
    if (f.ready()) { f.host_wait(); return 0.0; }
    const auto t0 = Clock::now();
    f.host_wait();
    return since(t0);
}

HostBuffer pinned_host(std::uint64_t bytes, int device) {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
    void * p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, static_cast<std::size_t>(std::max<std::uint64_t>(bytes, 1)), cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw RuntimeError("cannot pin " + std::to_string(bytes) + " bytes of host memory (cudaHostAlloc: " + cuda_error(e) +
                           "); lower pinned_budget or the staging slots, or free RAM");
    }
    return HostBuffer(p, bytes, true, [](void * q) { (void)cudaFreeHost(q); });
}

// Pinned bounce buffers for pageable sources: `count` chunks, each reused only after the copy out of
// it completed (host-synchronised on the worker, which is the thread that refills it).
struct Chunk {
    HostBuffer buf;
    EventPtr last;
};

constexpr std::uint64_t kChunkBytes = 16ull << 20;
constexpr int kChunks = 2;

class CudaTransport final : public engine::Transport {
public:
    explicit CudaTransport(int device)
        : device_(device),
          copy_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device))),
          device_name_(at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->name),
          worker_([this] { run(); }) {}

    ~CudaTransport() override {
        {
            std::lock_guard lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
        try {
            copy_.synchronize();
        } catch (...) {
        }
    }

    std::string name() const override { return "cuda"; }
    bool device_is_host() const override { return false; }
    int device_ordinal() const override { return device_; }

    FencePtr submit(CopyJob job) override {
        auto f = std::make_shared<CudaFence>();
        {
            std::lock_guard lk(m_);
            if (stop_) throw RuntimeError("CUDA transport: submit after shutdown");
            q_.emplace_back(std::move(job), f);
            ++pending_;
        }
        cv_.notify_all();
        return f;
    }

    double compute_wait(Fence & f) override {
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
        return order_after(f, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)));
    }

    FencePtr compute_fence() override {
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
        auto ev = std::make_shared<Event>();  // timing disabled: cheapest record/query
        ev->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)));
        return std::make_shared<CudaFence>(std::move(ev));
    }

    void drain() override {
        {
            std::unique_lock lk(m_);
            idle_cv_.wait(lk, [&] { return pending_ == 0; });
        }
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
        copy_.synchronize();
    }

    engine::TransportStats stats() const override {
        std::lock_guard lk(m_);
        // Fold the completed timing pairs; those still in flight are counted by a later call.
        std::vector<std::pair<EventPtr, EventPtr>> left;
        for (auto & [a, b] : timing_) {
            if (b->query()) event_s_ += static_cast<double>(a->elapsed_time(*b)) / 1000.0;
            else left.emplace_back(a, b);
        }
        timing_.swap(left);
        engine::TransportStats s = stats_;
        s.event_s = event_s_;
        if (!timing_.empty())
            s.event_reason = std::to_string(timing_.size()) + " uploads still in flight are not in event_s yet (drain first)";
        return s;
    }

    HostBuffer allocate_host(std::uint64_t bytes, bool pinned) override {
        if (!pinned) return HostBuffer::pageable(bytes, 4096);
        return pinned_host(bytes, device_);
    }

    // One copy on the copy stream, timed by CUDA events; the engine calls it while nothing is queued.
    double time_link_copy(void * dst, const void * src, std::uint64_t bytes) override {
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
        Event a(cudaEventDefault), b(cudaEventDefault);
        a.record(copy_);
        copy_async(dst, src, bytes);
        b.record(copy_);
        b.synchronize();
        return static_cast<double>(a.elapsed_time(b)) / 1000.0;
    }
    std::string link_clock() const override { return "CUDA events"; }

    engine::Capacities observe_device() const override {
        engine::Capacities c = engine::Capacities::observe_host();
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
        std::size_t free = 0, total = 0;
        const cudaError_t e = cudaMemGetInfo(&free, &total);
        if (e == cudaSuccess) {
            c.device_free = free;
            c.device_total = total;
        } else {
            (void)cudaGetLastError();  // unknown stays nullopt: the planner refuses growth on it
        }
        return c;
    }

private:
    void run() {
        for (;;) {
            auto item = next_copy_job(m_, cv_, q_, stop_);
            if (!item) return;
            auto & [job, fence] = *item;
            std::exception_ptr err;
            EventPtr start, end;
            double fill_s = 0;
            const auto t0 = Clock::now();
            try {
                c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
                if (job.slot_free) order_after(*job.slot_free, copy_);  // the slot's readers, on the copy stream
                start = std::make_shared<Event>(cudaEventDefault);
                end = std::make_shared<Event>(cudaEventDefault);
                if (job.fill) {
                    if (job.staging_free) job.staging_free->host_wait();  // the host rewrites the staging buffer
                    const auto f0 = Clock::now();
                    job.fill(job.staging);
                    fill_s = since(f0);
                    start->record(copy_);  // after the host fill: the event pair times the device copy
                    if (job.host_locked) copy_async(job.dst, job.staging, job.bytes);
                    else copy_pageable(job.dst, job.staging, job.bytes);
                } else if (job.host_locked) {
                    start->record(copy_);
                    copy_async(job.dst, job.src, job.bytes);
                } else {
                    start->record(copy_);
                    copy_pageable(job.dst, job.src, job.bytes);
                }
                end->record(copy_);
            } catch (const std::exception & e) {
                err = std::make_exception_ptr(RuntimeError("upload of group '" + job.group_name + "' failed: " + e.what()));
            } catch (...) {
                err = std::make_exception_ptr(RuntimeError("upload of group '" + job.group_name + "' failed"));
            }
            const double dt = since(t0);
            {
                std::lock_guard lk(m_);
                stats_.copy_s += dt;
                stats_.fill_s += fill_s;
                ++stats_.jobs;
                if (err) ++stats_.failures;
                else timing_.emplace_back(start, end);
            }
            fence->set_enqueued(err ? nullptr : end, err);
            {
                std::lock_guard lk(m_);
                --pending_;
            }
            idle_cv_.notify_all();
        }
    }

    void copy_async(void * dst, const void * src, std::uint64_t bytes) {
        check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, copy_.stream()), "cudaMemcpyAsync (host to device)");
    }

    void copy_pageable(void * dst, const void * src, std::uint64_t bytes) {
        if (chunks_.empty())
            for (int i = 0; i < kChunks; ++i) {
                Chunk c{pinned_host(kChunkBytes, device_), nullptr};
                std::memset(c.buf.data(), 0, static_cast<std::size_t>(kChunkBytes));
                chunks_.push_back(std::move(c));
            }
        for (std::uint64_t off = 0; off < bytes; off += kChunkBytes) {
            Chunk & c = chunks_[next_chunk_++ % chunks_.size()];
            if (c.last) c.last->synchronize();  // the previous copy out of this chunk completed
            const std::uint64_t n = std::min(kChunkBytes, bytes - off);
            stream_copy(c.buf.data(), static_cast<const char *>(src) + off, static_cast<std::size_t>(n));
            copy_async(static_cast<char *>(dst) + off, c.buf.data(), n);
            if (!c.last) c.last = std::make_shared<Event>();
            c.last->record(copy_);
        }
    }

    const int device_;
    c10::cuda::CUDAStream copy_;
    std::string device_name_;
    std::vector<Chunk> chunks_;  // worker only
    std::size_t next_chunk_ = 0;
    mutable std::mutex m_;
    std::condition_variable cv_, idle_cv_;
    std::deque<std::pair<CopyJob, std::shared_ptr<CudaFence>>> q_;
    std::size_t pending_ = 0;
    bool stop_ = false;
    engine::TransportStats stats_;
    mutable std::vector<std::pair<EventPtr, EventPtr>> timing_;
    mutable double event_s_ = 0;
    std::thread worker_;  // last: started after the state above exists
};

}  // namespace

bool cuda_available(std::string * reason) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (reason) *reason = "cudaGetDeviceCount: " + cuda_error(e);
        return false;
    }
    if (n == 0) {
        if (reason) *reason = "no CUDA device visible (cudaGetDeviceCount = 0)";
        return false;
    }
    if (!at::hasCUDA()) {
        if (reason) *reason = "LibTorch's CUDA backend (libtorch_cuda) is not loaded in this process";
        return false;
    }
    return true;
}

std::unique_ptr<engine::Transport> make_cuda_transport(int device) {
    std::string why;
    if (!cuda_available(&why)) throw RuntimeError("no CUDA device: " + why + "; use the CPU transport");
    const int n = static_cast<int>(c10::cuda::device_count());
    if (device < 0 || device >= n)
        throw UsageError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " visible); pick 0.." +
                         std::to_string(n - 1));
    try {
        return std::make_unique<CudaTransport>(device);
    } catch (const ddo::Error &) {
        throw;
    } catch (const std::exception & e) {
        throw RuntimeError(std::string("CUDA transport on device ") + std::to_string(device) + ": " + e.what());
    }
}

#else  // LibTorch without CUDA headers

bool cuda_available(std::string * reason) {
    if (reason) *reason = "this build's LibTorch has no CUDA support";
    return false;
}

std::unique_ptr<engine::Transport> make_cuda_transport(int) {
    throw RuntimeError("no CUDA device: this build's LibTorch has no CUDA support; use the CPU transport");
}

#endif

}  // namespace ddo::torch
