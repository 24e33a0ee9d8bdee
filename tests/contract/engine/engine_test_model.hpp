// What the engine tests share: the built linear allocator plugin (also for tensor_views_test and the cuda
// engine tests), one synthetic checkpoint of 4 groups of 208 KiB (float32) written once per process, and
// capacities large enough that the planner never refuses for lack of memory (also for tensor_views_test).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/engine/capacities.hpp"
#include "ddo/store/weight_store.hpp"
#include "synthetic_model.hpp"

namespace ddo::testing::engine_model {

inline const ddo_allocator_vtable * linear() {
    static const ddo_allocator_vtable * vt = bench::load_allocator_for_tests(bench::linear_plugin_path(DDO_BINARY_DIR));
    return vt;
}

inline const bench::SyntheticShape kShape{4, 64, 3, 4};  // 4 groups of 208 KiB (float32)

inline const store::WeightStore & store_once() {
    static store::WeightStore ws = [] {
        const auto p = std::filesystem::temp_directory_path() /
                       ("ddo_engine_contract_" + std::to_string(::getpid()) + ".safetensors");
        bench::write_synthetic_checkpoint(p, kShape);
        return store::WeightStore::open_file(p);
    }();
    return ws;
}

inline engine::Capacities big_caps() {
    engine::Capacities c;
    c.device_free = 1ull << 34;
    c.mem_available = 1ull << 34;
    return c;
}

}  // namespace ddo::testing::engine_model
