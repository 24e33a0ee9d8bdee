// The CPU transport: one worker thread copies group payloads into slots (host memory stands in for
// the device), in submission order. Compute runs on the calling thread, so compute_wait blocks it.
#pragma once

#include <memory>

#include "ddo/engine/transport.hpp"

namespace ddo::engine {

// Throws RuntimeError when the worker cannot be started.
std::unique_ptr<Transport> make_cpu_transport();

}  // namespace ddo::engine
