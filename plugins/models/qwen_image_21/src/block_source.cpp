#include "block_source.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

uint64_t weights_bytes(const TransformerBlockWeights & w) {
    uint64_t b = 0;
    for (const auto * t : {&w.to_q.weight, &w.to_k.weight, &w.to_v.weight, &w.to_out.weight, &w.norm_q, &w.norm_k,
                           &w.mlp_proj.weight, &w.mlp_gate.weight, &w.mlp_out.weight})
        b += uint64_t(t->numel()) * t->element_size();
    return b;
}

TransformerBlockWeights to_device(TransformerBlockWeights w, at::Device d) {
    for (auto * t : {&w.to_q.weight, &w.to_k.weight, &w.to_v.weight, &w.to_out.weight, &w.norm_q, &w.norm_k,
                     &w.mlp_proj.weight, &w.mlp_gate.weight, &w.mlp_out.weight})
        *t = t->to(d);
    return w;
}

class ResidentBlocks final : public BlockSource {
public:
    ResidentBlocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt, at::Device d) {
        for (int64_t i = 0; i < c.num_layers; ++i) {
            blocks_.push_back(to_device(load_transformer_block(f, c, i, dt), d));
            if (d.is_cuda()) bytes_ += weights_bytes(blocks_.back());
        }
    }
    const TransformerBlockWeights & acquire(int64_t i) override { return blocks_.at(size_t(i)); }
    void release(int64_t) override {}
    std::string route() const override { return "resident"; }
    uint64_t bytes_streamed() const override { return bytes_; }

private:
    std::vector<TransformerBlockWeights> blocks_;
    uint64_t bytes_ = 0;
};

class EngineBlocks final : public BlockSource {
public:
    EngineBlocks(model::ComponentWeights & w, const TransformerConfig & c, std::unique_ptr<model::ComponentWeights> owned)
        : owned_(std::move(owned)), w_(w), c_(c) {}
    const TransformerBlockWeights & acquire(int64_t i) override {
        const auto & t = w_.acquire(std::size_t(i));
        weights_[i] = block_weights_from([&](const std::string & n) { return t.at(n); }, c_, i,
                                         [&](const std::string & n) { return t.lora(n); });
        return weights_[i];
    }
    void release(int64_t i) override {
        weights_.erase(i);
        w_.release(std::size_t(i));
    }
    uint64_t skip(int64_t i) override { return w_.skip(std::size_t(i)); }
    std::string route() const override { return w_.route(); }
    uint64_t bytes_streamed() const override { return w_.bytes_streamed(); }
    uint64_t finish() override {
        weights_.clear();
        return w_.finish();
    }
    nlohmann::json report() const override { return w_.report(); }

private:
    std::unique_ptr<model::ComponentWeights> owned_;  // make_engine_blocks only; declared first: destroyed last
    model::ComponentWeights & w_;
    TransformerConfig c_;
    std::map<int64_t, TransformerBlockWeights> weights_;
};

}  // namespace

std::vector<model::GroupSpec> transformer_groups(const TransformerConfig & c) {
    std::vector<model::GroupSpec> groups;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        model::GroupSpec g{"transformer_blocks." + std::to_string(i), {}};
        for (auto & [n, shape] : block_tensor_specs(c, i)) g.tensors.push_back(n);
        groups.push_back(std::move(g));
    }
    return groups;
}

std::unique_ptr<BlockSource> engine_blocks(model::ComponentWeights & weights, const TransformerConfig & c) {
    return std::make_unique<EngineBlocks>(weights, c, nullptr);
}

std::unique_ptr<BlockSource> make_engine_blocks(const store::ComponentSource & transformer_dir, const TransformerConfig & c,
                                                at::ScalarType dt, const model::ComponentPlan & plan) {
    auto w = model::ComponentWeights::open(transformer_dir, transformer_groups(c), plan, dt);
    auto & ref = *w;
    return std::make_unique<EngineBlocks>(ref, c, std::move(w));
}

uint64_t block_payload_bytes(const TensorFile & f, const TransformerConfig & c, int64_t index) {
    uint64_t b = 0;
    for (auto & [n, s] : block_tensor_specs(c, index)) b += f.nbytes_of(n);
    return b;
}

std::unique_ptr<BlockSource> make_resident_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                  at::Device device) {
    return std::make_unique<ResidentBlocks>(f, c, dt, device);
}

}  // namespace ddo::qwen_image_21
