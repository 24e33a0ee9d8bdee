// What LibTorch allocates, counted exactly: the measured side of the memory forecast (Note [Memory forecast] in
// docs/architecture.md). On the CPU a counting allocator replaces LibTorch's default CPU allocator (c10::alloc_cpu
// underneath, as the default's; every tensor allocated after install() is counted at malloc_usable_size, freed or
// not); on CUDA the caching allocator's own statistics (allocated bytes, not reserved). Peaks are per window: a
// window begins at reset_peak() (a phase begins) and the peak since then is read at its end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/Device.h>

namespace ddo::torch {

struct AllocationReading {
    std::optional<std::uint64_t> current, peak;  // bytes; nullopt: not measurable here (reason says why)
    std::string source;                          // what was read
    std::string reason;                          // why a value is missing (empty when both are known)
};

class AllocationMeter {
public:
    // Installs the counting CPU allocator (once per process; later calls do nothing). Call it before the tensors to
    // be counted are allocated: tensors from before are not counted, their frees neither.
    static void install();
    static bool installed() noexcept;
    // The peak since the last reset becomes the current value, on `device` (the CPU counter, or the CUDA device's
    // caching allocator).
    static void reset_peak(const c10::Device & device);
    static AllocationReading read(const c10::Device & device);
};

}  // namespace ddo::torch
