#include "ddo/torch/allocation_meter.hpp"

#include <malloc.h>

#include <atomic>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace ddo::torch {
namespace {

std::atomic<std::uint64_t> g_current{0}, g_peak{0};
std::atomic<bool> g_installed{false};

void raise_peak(std::uint64_t now) {
    std::uint64_t p = g_peak.load(std::memory_order_relaxed);
    while (now > p && !g_peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
}

void counted_delete(void * ptr) {
    if (!ptr) return;
    g_current.fetch_sub(::malloc_usable_size(ptr), std::memory_order_relaxed);
    c10::profiledCPUMemoryReporter().Delete(ptr);
    c10::free_cpu(ptr);
}

// LibTorch's DefaultCPUAllocator (c10/core/CPUAllocator.cpp), counting: the same alloc_cpu / free_cpu and profiler
// reports, plus the usable size of each block in g_current. The context is the pointer (a simple data pointer, so
// raw_allocate / raw_deallocate keep working).
struct CountingCpuAllocator final : c10::Allocator {
    c10::DataPtr allocate(size_t nbytes) override {
        void * data = c10::alloc_cpu(nbytes);  // throws c10::Error when out of memory, as the default does
        if (data) {
            raise_peak(g_current.fetch_add(::malloc_usable_size(data), std::memory_order_relaxed) +
                       ::malloc_usable_size(data));
            c10::profiledCPUMemoryReporter().New(data, nbytes);
        }
        return {data, data, &counted_delete, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }
    void copy_data(void * dest, const void * src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingCpuAllocator g_allocator;

}  // namespace

void AllocationMeter::install() {
    static std::once_flag once;
    std::call_once(once, [] {
        // Priority above the default's (0) and below nothing else ddo registers: later registrations of the same
        // priority would replace it, and none exists.
        c10::SetCPUAllocator(&g_allocator, /*priority=*/1);
        g_installed = true;
    });
}

bool AllocationMeter::installed() noexcept { return g_installed.load(); }

void AllocationMeter::reset_peak(const c10::Device & device) {
    if (device.is_cuda()) {
        try {
            const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
            if (c10::cuda::device_count() > index) c10::cuda::CUDACachingAllocator::resetPeakStats(index);
        } catch (...) {
        }
        return;
    }
    g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

AllocationReading AllocationMeter::read(const c10::Device & device) {
    AllocationReading r;
    if (device.is_cuda()) {
        r.source = "PyTorch's CUDA caching allocator: allocated bytes (current, peak since the phase began)";
        try {
            const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
            if (c10::cuda::device_count() <= index) {
                r.reason = "no CUDA device " + std::to_string(index) + " in this process";
                return r;
            }
            const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
            constexpr auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
            r.current = std::uint64_t(stats.allocated_bytes[aggregate].current);
            r.peak = std::uint64_t(stats.allocated_bytes[aggregate].peak);
        } catch (const std::exception & e) {
            r.reason = std::string("the caching allocator's statistics could not be read: ") + e.what();
        }
        return r;
    }
    r.source = "ddo's counting CPU allocator (LibTorch's CPU tensors, malloc_usable_size of each block)";
    if (!installed()) {
        r.reason = "the counting CPU allocator is not installed in this process";
        return r;
    }
    r.current = g_current.load(std::memory_order_relaxed);
    r.peak = std::max(g_peak.load(std::memory_order_relaxed), *r.current);
    return r;
}

}  // namespace ddo::torch
