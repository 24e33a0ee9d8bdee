#include "block_source.hpp"

#include <map>
#include <vector>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

uint64_t weights_bytes(const TransformerBlockWeights & w) {
    uint64_t b = 0;
    for (const auto * t : {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.norm_q, &w.norm_k, &w.mlp_proj, &w.mlp_gate,
                           &w.mlp_out})
        b += uint64_t(t->numel()) * t->element_size();
    return b;
}

TransformerBlockWeights to_device(TransformerBlockWeights w, at::Device d) {
    for (auto * t : {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.norm_q, &w.norm_k, &w.mlp_proj, &w.mlp_gate, &w.mlp_out})
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

class DiskBlocks final : public BlockSource {
public:
    DiskBlocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt, at::Device d)
        : f_(f), c_(c), dt_(dt), d_(d) {}
    const TransformerBlockWeights & acquire(int64_t i) override {
        auto & slot = live_[i];
        slot = to_device(load_transformer_block(f_, c_, i, dt_), d_);
        bytes_ += block_payload_bytes(f_, c_, i);
        return slot;
    }
    void release(int64_t i) override { live_.erase(i); }
    std::string route() const override { return "disk"; }
    uint64_t bytes_streamed() const override { return bytes_; }

private:
    const TensorFile & f_;
    TransformerConfig c_;
    at::ScalarType dt_;
    at::Device d_;
    std::map<int64_t, TransformerBlockWeights> live_;
    uint64_t bytes_ = 0;
};

class DynamicBlocks final : public BlockSource {
public:
    DynamicBlocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt, at::Device d, uint64_t budget,
                  int slots)
        : d_(d) {
        if (slots < 1) throw UsageError("qwen_image_21: the dynamic route needs at least one staging slot");
        const int64_t n = c.num_layers;
        for (int64_t i = 0; i < n; ++i) host_.push_back(load_transformer_block(f, c, i, dt));
        const uint64_t per = host_.empty() ? 0 : weights_bytes(host_[0]);
        const int64_t fit = per ? std::min<int64_t>(n, int64_t(budget / per)) : n;
        resident_.assign(size_t(n), false);
        for (int64_t k = 0; k < fit; ++k) resident_[size_t(k * n / std::max<int64_t>(fit, 1))] = true;  // spread
        dev_.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i)
            if (resident_[size_t(i)]) dev_[size_t(i)] = to_device(host_[size_t(i)], d);
        for (int k = 0; k < slots && !host_.empty(); ++k) {
            auto w = host_[0];
            for (auto * t : {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.norm_q, &w.norm_k, &w.mlp_proj, &w.mlp_gate,
                             &w.mlp_out})
                *t = at::empty_like(*t, t->options().device(d));
            slots_.push_back(std::move(w));
        }
    }
    const TransformerBlockWeights & acquire(int64_t i) override {
        if (resident_.at(size_t(i))) return dev_[size_t(i)];
        auto & slot = slots_[next_++ % slots_.size()];
        const auto & h = host_[size_t(i)];
        const at::Tensor * src[] = {&h.to_q, &h.to_k, &h.to_v, &h.to_out, &h.norm_q, &h.norm_k, &h.mlp_proj,
                                    &h.mlp_gate, &h.mlp_out};
        at::Tensor * dst[] = {&slot.to_q, &slot.to_k, &slot.to_v, &slot.to_out, &slot.norm_q, &slot.norm_k,
                              &slot.mlp_proj, &slot.mlp_gate, &slot.mlp_out};
        for (int k = 0; k < 9; ++k) dst[k]->copy_(*src[k]);
        bytes_ += weights_bytes(h);
        return slot;
    }
    void release(int64_t) override {}
    std::string route() const override { return "dynamic"; }
    uint64_t bytes_streamed() const override { return bytes_; }
    int64_t resident_blocks() const {
        int64_t r = 0;
        for (bool b : resident_) r += b;
        return r;
    }

private:
    at::Device d_;
    std::vector<TransformerBlockWeights> host_, dev_, slots_;
    std::vector<bool> resident_;
    size_t next_ = 0;
    uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<BlockSource> make_dynamic_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                 at::Device device, uint64_t resident_budget_bytes, int slots) {
    return std::make_unique<DynamicBlocks>(f, c, dt, device, resident_budget_bytes, slots);
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

std::unique_ptr<BlockSource> make_disk_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                              at::Device device) {
    return std::make_unique<DiskBlocks>(f, c, dt, device);
}

}  // namespace ddo::qwen_image_21
