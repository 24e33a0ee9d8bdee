// The synthetic workload's forward (tools/bench/synthetic_model.hpp) written with ATen ops over the
// engine's tensor views: what a model plugin does. Shared by the CPU tensor-view tests and the CUDA
// transport tests. Block granularity only (attn + mlp of one block per group).
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/engine/engine.hpp"
#include "ddo/torch/tensor_views.hpp"
#include "synthetic_model.hpp"

namespace ddo::testing {

inline at::Tensor aten_synthetic_input(const bench::SyntheticShape & s, const at::Device & dev) {
    std::vector<float> x = bench::synthetic_input(s);
    return at::from_blob(x.data(), {s.tokens, s.width}, at::kFloat).clone().to(dev);
}

// One step: x <- blocks(x); returns the output on the CPU.
inline at::Tensor aten_synthetic_step(engine::Engine & e, const bench::SyntheticShape & s, const at::Device & dev) {
    at::Tensor x = aten_synthetic_input(s, dev);
    for (std::size_t g = 0; g < e.layout().size(); ++g) {
        engine::Lease l = e.acquire(g);
        const torch::GroupTensors w = torch::tensor_views(l);
        const std::string p = e.layout().group(g).decl;
        const at::Tensor q = at::linear(x, w.at(p + ".attn.to_q.weight"));
        const at::Tensor k = at::linear(x, w.at(p + ".attn.to_k.weight"));
        const at::Tensor v = at::linear(x, w.at(p + ".attn.to_v.weight"));
        const at::Tensor m = 0.5 * q + 0.25 * at::tanh(k) + 0.25 * v;
        x = x + 0.5 * at::linear(m, w.at(p + ".attn.to_out.weight"));
        const at::Tensor gate = at::linear(x, w.at(p + ".mlp.gate.weight"));
        const at::Tensor up = at::linear(x, w.at(p + ".mlp.up.weight"));
        x = x + 0.5 * at::linear(at::silu(gate) * up, w.at(p + ".mlp.down.weight"));
        l.release();  // records the compute fence after the kernels that read the slot
    }
    return x.cpu();
}

}  // namespace ddo::testing
