#include "weights.hpp"

#include <algorithm>

#include "ddo/error.hpp"

namespace ddo::ltx2 {

ResidentWeights::ResidentWeights(const model::TensorFile & file, at::ScalarType dtype, at::Device device)
    : file_(file), dtype_(dtype), device_(device) {}

at::Tensor ResidentWeights::get(const std::string & name) {
    if (auto it = cache_.find(name); it != cache_.end()) return it->second;
    // A quantized tensor is decoded straight into the compute dtype (Note [Quantized weights]), as on the engine;
    // RuntimeError naming file and tensor when absent.
    auto t = at::isFloatingType(file_.dtype_of(name)) ? file_.read_as(name, dtype_) : file_.read(name);
    t = t.to(device_);
    cache_.emplace(name, t);
    return t;
}

bool ResidentWeights::contains(const std::string & name) const { return file_.contains(name); }

EngineWeights::EngineWeights(model::ComponentWeights & weights, const std::vector<model::GroupSpec> & groups,
                             at::ScalarType dtype, at::Device device)
    : w_(weights), dtype_(dtype), device_(device) {
    for (std::size_t i = 0; i < groups.size(); ++i) {
        index_.emplace(groups[i].name, i);
        for (const auto & t : groups[i].tensors) tensor_group_.emplace(t, i);
    }
}

EngineWeights::~EngineWeights() {
    // Scopes end before the source in correct code; release what an exception left open.
    while (!open_.empty()) {
        try {
            w_.release(open_.back().first);
        } catch (...) {
        }
        open_.pop_back();
    }
}

void EngineWeights::enter(const std::string & module) {
    const auto it = index_.find(module);
    if (it == index_.end()) return;
    open_.emplace_back(it->second, &w_.acquire(it->second));
}

void EngineWeights::leave(const std::string & module) {
    const auto it = index_.find(module);
    if (it == index_.end()) return;
    const auto pos = std::find_if(open_.rbegin(), open_.rend(), [&](const auto & o) { return o.first == it->second; });
    if (pos == open_.rend()) return;
    open_.erase(std::next(pos).base());
    w_.release(it->second);
}

std::uint64_t EngineWeights::skip(const std::string & module) {
    const auto it = index_.find(module);
    return it == index_.end() ? 0 : w_.skip(it->second);
}

at::Tensor EngineWeights::get(const std::string & name) {
    for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
        if (it->second->contains(name)) return it->second->at(name);
    }
    const auto owner = tensor_group_.find(name);
    throw RuntimeError(w_.component() + ": tensor '" + name + "' was read outside the scope of its execution group" +
                       (owner == tensor_group_.end() ? std::string(" (no group holds it)")
                                                     : " (group " + std::to_string(owner->second) + ")") +
                       "; this is a bug in the model plugin");
}

bool EngineWeights::contains(const std::string & name) const { return tensor_group_.count(name) != 0; }

const model::LoraDelta * EngineWeights::lora(const std::string & name) {
    for (auto it = open_.rbegin(); it != open_.rend(); ++it)
        if (it->second->contains(name)) return it->second->lora(name);
    return nullptr;
}

}  // namespace ddo::ltx2
