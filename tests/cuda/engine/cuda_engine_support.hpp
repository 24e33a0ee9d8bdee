// Shared by the CUDA engine tests (label cuda): the skip when no device is usable, and the linear allocator
// plugin loaded from the build tree.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "contract/engine/engine_test_model.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "synthetic_model.hpp"

// Skips (never passes) the test when no CUDA device is usable, with ddo::torch::cuda_available's reason.
#define DDO_REQUIRE_CUDA()                                                                 \
    do {                                                                                   \
        std::string why_;                                                                  \
        if (!ddo::torch::cuda_available(&why_)) GTEST_SKIP() << "no CUDA device: " << why_;     \
    } while (0)

namespace ddo::testing::cuda {

using engine_model::linear;  // the built linear allocator plugin, as the CPU engine contract tests load it

}  // namespace ddo::testing::cuda
