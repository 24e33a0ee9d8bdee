// Shared by the CUDA engine tests (label cuda): the skip when no device is usable, and the linear allocator
// plugin loaded from the build tree.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ddo/torch/cuda_transport.hpp"
#include "synthetic_model.hpp"

// Skips (never passes) the test when no CUDA device is usable, with ddo::torch::cuda_available's reason.
#define DDO_REQUIRE_CUDA()                                                                 \
    do {                                                                                   \
        std::string why_;                                                                  \
        if (!ddo::torch::cuda_available(&why_)) GTEST_SKIP() << "no CUDA device: " << why_;     \
    } while (0)

namespace ddo::testing::cuda {

inline const ddo_allocator_vtable * linear() {
    static const ddo_allocator_vtable * vt = bench::load_allocator_for_tests(bench::linear_plugin_path(DDO_BINARY_DIR));
    return vt;
}

}  // namespace ddo::testing::cuda
