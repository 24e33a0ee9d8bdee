// A synthetic transformer-like workload for the engine bench and tests: N blocks, each with an
// attention half (q, k, v, o: width x width) and a SwiGLU MLP half (gate, up: ratio*width x width;
// down: width x ratio*width), F32, deterministic values. The forward is plain single-threaded C++ with
// a fixed summation order, so the output depends only on the weight values, never on where they live:
// streamed and resident routes must agree bitwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/engine/engine.hpp"
#include "ddo/engine/execution_group.hpp"

namespace ddo::bench {

struct SyntheticShape {
    int blocks = 8;
    int width = 768;
    int mlp_ratio = 3;
    int tokens = 32;
};

// Writes the synthetic weights as one safetensors file (deterministic from `seed`).
void write_synthetic_checkpoint(const std::filesystem::path & file, const SyntheticShape & shape, std::uint32_t seed = 1);
// Block-level group declarations (attn/mlp parts labelled) for that checkpoint.
std::vector<engine::GroupDecl> synthetic_groups(const SyntheticShape & shape);
// Deterministic input activations [tokens, width].
std::vector<float> synthetic_input(const SyntheticShape & shape);
// Runs `steps` steps of the forward under the engine; returns the final activations.
// fresh input each step (x0), so each step's output is identical; the last is returned.
std::vector<float> run_synthetic(engine::Engine & engine, const SyntheticShape & shape, int steps,
                                 std::vector<double> * step_seconds = nullptr);

// Minimal tensor writer shared by tests: name, dtype ("F32"...), shape, raw bytes.
struct RawTensor {
    std::string name;
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::vector<unsigned char> bytes;
};
void write_safetensors(const std::filesystem::path & file, const std::vector<RawTensor> & tensors,
                       const std::vector<std::pair<std::string, std::string>> & metadata = {});

// dlopen of a built allocator plugin (negotiate + get_vtable with a stub host API). Throws
// RuntimeError with the dlerror. Prefer ddo::PluginRegistry in the host; this is for tests/bench.
const ddo_allocator_vtable * load_allocator_for_tests(const std::filesystem::path & so);
// <build>/lib/ddo/plugins/libddo_allocator_linear.so
std::filesystem::path linear_plugin_path(const std::filesystem::path & build_dir);

}  // namespace ddo::bench
