#include "ddo/model/model_session.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"

namespace ddo::model {

ModelSession & ModelSession::of(SessionSlot & slot) {
    if (!slot.state) slot.state.reset(new ModelSession(slot));
    auto * s = dynamic_cast<ModelSession *>(slot.state.get());
    if (!s) throw UsageError("the run's session slot holds state the model kit did not make");
    return *s;
}

ModelSession::ModelSession(const SessionSlot & slot) {
    keep_.keep_weights = slot.keep_weights;
    keep_.embeddings_cache_bytes = slot.embeddings_cache_bytes;
}

ModelSession::~ModelSession() = default;

std::unique_ptr<ComponentWeights> ModelSession::take(const std::string & component, const std::string & key, std::string & why) {
    std::unique_ptr<ComponentWeights> out, stale;
    {
        std::lock_guard lock(mu_);
        auto it = weights_.find(component);
        if (it == weights_.end() || !it->second.weights) {
            why = "nothing kept for " + component + " (the first run to open it, or the last run did not give it back)";
            return nullptr;
        }
        if (it->second.key == key) {
            out = std::move(it->second.weights);
        } else {
            why = "the kept weights were loaded for other settings (route, capacities, dtype, files or LoRA differ): "
                  "freed before loading these";
            ++it->second.misses;
            it->second.last_miss = why;
            stale = std::move(it->second.weights);
        }
    }
    stale.reset();  // freed outside the lock: an engine's close waits for its device
    return out;
}

void ModelSession::keep(const std::string & component, const std::string & key, std::unique_ptr<ComponentWeights> weights) {
    std::unique_ptr<ComponentWeights> old;
    {
        std::lock_guard lock(mu_);
        auto & e = weights_[component];
        old = std::move(e.weights);
        e.key = key;
        e.weights = std::move(weights);
    }
    old.reset();
}

std::uint64_t ModelSession::runs(const std::string & component) const {
    std::lock_guard lock(mu_);
    const auto it = weights_.find(component);
    return it == weights_.end() ? 0 : it->second.runs;
}

void ModelSession::count_run(const std::string & component, bool reused) {
    std::lock_guard lock(mu_);
    auto & e = weights_[component];
    if (!reused) e.runs = 0;
    ++e.runs;
    ++(reused ? e.reused : e.built);
}

std::optional<NamedTensors> ModelSession::find_embeddings(const std::string & key) {
    std::lock_guard lock(mu_);
    for (auto it = embeddings_.begin(); it != embeddings_.end(); ++it) {
        if (it->key != key) continue;
        embeddings_.splice(embeddings_.begin(), embeddings_, it);  // most recently used first
        ++hits_;
        NamedTensors copy;
        for (const auto & [n, t] : embeddings_.front().tensors) copy.emplace_back(n, t.clone());
        return copy;
    }
    ++misses_;
    return std::nullopt;
}

void ModelSession::keep_embeddings(const std::string & key, const NamedTensors & tensors) {
    Embedding e{key, {}, 0};
    for (const auto & [n, t] : tensors) {
        auto host = t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
        e.bytes += std::uint64_t(host.nbytes());
        e.tensors.emplace_back(n, std::move(host));
    }
    std::lock_guard lock(mu_);
    if (e.bytes > keep_.embeddings_cache_bytes) return;
    for (auto it = embeddings_.begin(); it != embeddings_.end(); ++it)
        if (it->key == key) {
            embedding_bytes_ -= it->bytes;
            embeddings_.erase(it);
            break;
        }
    while (!embeddings_.empty() && embedding_bytes_ + e.bytes > keep_.embeddings_cache_bytes) {
        embedding_bytes_ -= embeddings_.back().bytes;
        embeddings_.pop_back();
        ++evictions_;
    }
    embedding_bytes_ += e.bytes;
    embeddings_.push_front(std::move(e));
}

nlohmann::json ModelSession::to_json() const {
    std::lock_guard lock(mu_);
    nlohmann::json w = nlohmann::json::object();
    for (const auto & [c, e] : weights_)
        w[c] = {{"key", e.key.substr(0, 16)},
                {"held", e.weights ? e.weights->held() : nlohmann::json(nullptr)},
                {"runs", e.runs},
                {"built", e.built},
                {"reused", e.reused},
                {"misses", e.misses},
                {"last_miss", e.last_miss}};
    return {{"keep_weights", keep_.keep_weights},
            {"weights", std::move(w)},
            {"embeddings",
             {{"bound_bytes", keep_.embeddings_cache_bytes},
              {"bytes", embedding_bytes_},
              {"entries", embeddings_.size()},
              {"hits", hits_},
              {"misses", misses_},
              {"evictions", evictions_}}}};
}

}  // namespace ddo::model
