// The CUDA transport (ATen stream/event API): a dedicated copy stream, pinned host staging, one
// CUDA event per upload. compute_wait makes the *current* CUDA stream wait on the upload's event
// (the host never blocks); compute_fence records an event on the current stream, which guards the
// slot's reuse. Uploads from pageable memory go through pinned staging buffers.
#pragma once

#include <memory>
#include <string>

#include "ddo/engine/transport.hpp"

namespace ddo::torch {

// Whether a CUDA device is usable; reason says why not.
bool cuda_available(std::string * reason = nullptr);
// Throws ddo::RuntimeError ("no CUDA device: <reason>; use the CPU transport") when unavailable.
std::unique_ptr<ddo::engine::Transport> make_cuda_transport(int device = 0);

}  // namespace ddo::torch
