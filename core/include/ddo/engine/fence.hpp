// A completion fence: an upload finished, or the compute that read a slot finished.
// CPU transport: a host flag + condition variable. CUDA transport: a CUDA event (core/torch).
#pragma once

#include <memory>

namespace ddo::engine {

class Fence {
public:
    virtual ~Fence() = default;
    // Non-blocking: has the work completed (successfully or not)?
    virtual bool ready() const = 0;
    // Blocks the calling host thread until complete. Rethrows a failure of the work as
    // ddo::RuntimeError (naming the group). Used by workers, drains and the CPU compute path only.
    virtual void host_wait() = 0;
};
using FencePtr = std::shared_ptr<Fence>;

// A fence that is complete from the start (CPU compute is synchronous).
FencePtr ready_fence();

}  // namespace ddo::engine
