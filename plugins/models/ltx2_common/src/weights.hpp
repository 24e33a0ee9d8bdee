// Where LTX-2 model math reads its weights: a named-tensor source with module scopes. The math asks for a tensor by
// its checkpoint name (get) inside the scope of the module that owns it (Scope): a resident source ignores the
// scopes; the engine source acquires the execution group named by the scope from the model kit's ComponentWeights
// (DiT blocks, VAE leaves) and releases it when the scope ends, so the same code runs on every route.
//
//   ltx2::Weights::Scope s(w, "transformer_blocks.3");   // group "transformer_blocks.3" on the device
//   auto q = at::linear(x, w.get("transformer_blocks.3.attn1.to_q.weight"), ...);
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"

namespace ddo::ltx2 {

class Weights {
public:
    virtual ~Weights() = default;
    // The tensor `name` (checkpoint naming) on the compute device in the compute dtype. Valid while the scope that
    // made it available is open (resident sources: for the source's lifetime). Throws RuntimeError naming it.
    virtual at::Tensor get(const std::string & name) = 0;
    virtual bool contains(const std::string & name) const = 0;
    // The LoRA factors adapting weight tensor `name` (Note [Applying LoRA]), null when none; valid as get()'s tensor.
    virtual const model::LoraDelta * lora(const std::string & /*name*/) { return nullptr; }
    virtual at::Device device() const = 0;
    virtual at::ScalarType dtype() const = 0;
    // Module `module` (an execution-group name) does not run in this pass: a step cache reuses its output (Note [Step
    // caching]). Returns the bytes of its weights therefore not streamed; a resident source streams nothing (0).
    virtual std::uint64_t skip(const std::string & /*module*/) { return 0; }

    // RAII: the weights of module `module` (an execution-group name) are needed until the scope ends.
    class Scope {
    public:
        Scope(Weights & w, std::string module) : w_(w), module_(std::move(module)) { w_.enter(module_); }
        ~Scope() { w_.leave(module_); }
        Scope(const Scope &) = delete;
        Scope & operator=(const Scope &) = delete;

    private:
        Weights & w_;
        std::string module_;
    };

protected:
    virtual void enter(const std::string & /*module*/) {}
    virtual void leave(const std::string & /*module*/) {}
};

// Every tensor read from a checkpoint once, on first use, cast to `dtype` and moved to `device` (tests, references,
// and small components such as the vocoder). `file` is borrowed and must outlive the source.
class ResidentWeights final : public Weights {
public:
    ResidentWeights(const model::TensorFile & file, at::ScalarType dtype, at::Device device);
    at::Tensor get(const std::string & name) override;
    bool contains(const std::string & name) const override;
    at::Device device() const override { return device_; }
    at::ScalarType dtype() const override { return dtype_; }

private:
    const model::TensorFile & file_;
    at::ScalarType dtype_;
    at::Device device_;
    std::unordered_map<std::string, at::Tensor> cache_;
};

// The engine's weights of one component (borrowed; the run unloads them). Scopes name execution groups of the
// GroupSpec list the weights were opened with; a scope that names no group (a module that is part of a larger
// group) is a no-op. get() looks the tensor up in the groups open now, innermost first.
class EngineWeights final : public Weights {
public:
    EngineWeights(model::ComponentWeights & weights, const std::vector<model::GroupSpec> & groups,
                  at::ScalarType dtype, at::Device device);
    ~EngineWeights() override;
    at::Tensor get(const std::string & name) override;
    bool contains(const std::string & name) const override;
    const model::LoraDelta * lora(const std::string & name) override;
    at::Device device() const override { return device_; }
    at::ScalarType dtype() const override { return dtype_; }
    // ComponentWeights::skip for the group `module` names (the engine neither acquires nor streams it); a module that
    // names no group: 0.
    std::uint64_t skip(const std::string & module) override;

protected:
    void enter(const std::string & module) override;
    void leave(const std::string & module) override;

private:
    model::ComponentWeights & w_;
    std::map<std::string, std::size_t> index_;     // group name -> index
    std::unordered_map<std::string, std::size_t> tensor_group_;  // tensor name -> index
    std::vector<std::pair<std::size_t, const model::GroupTensors *>> open_;  // acquired now, innermost last
    at::ScalarType dtype_;
    at::Device device_;
};

}  // namespace ddo::ltx2
