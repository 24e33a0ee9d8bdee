// ModelSession: what the model kit keeps between the runs of one `ddo-host serve` (ddo/run_session.hpp; Note
// [Serving], "Weight reuse"). Two stores, each bounded:
//   - weights: at most one entry per component, the ComponentWeights a run unloaded (engine plan, residents, host
//     copies, slots, what was converted or merged once), under the key of everything that loaded state depends on
//     (ModelRun::open_weights makes it). A run takes the entry out when its key matches and gives it back at unload;
//     an entry under another key is freed before the run builds its own, so two versions of a component are never
//     held at once. A run that fails or is interrupted keeps what it took: the entry is freed with the run.
//   - prompt embeddings: the tensors a text encoder produced, under the key of everything they depend on, kept on the
//     host, least recently used first out when the byte bound is reached.
// The host serialises runs (one job at a time); the lock guards to_json(), which the HTTP threads call.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_output.hpp"
#include "ddo/run_session.hpp"

namespace ddo::model {

class ModelSession final : public RunSession {
public:
    // The kit's session in `slot`, made there on first use. Throws UsageError when the slot holds another kind.
    static ModelSession & of(SessionSlot & slot);
    ~ModelSession() override;

    // Whether `component`'s weights stay loaded between runs (SessionSlot::keep_weights).
    bool keeps(const std::string & component) const { return keep_.keeps(component); }
    // `component`'s kept weights when they were loaded under `key`, taken out of the session (the caller owns them
    // now). Null otherwise; `why` then says why (nothing kept, or what differed: the entry is freed here).
    std::unique_ptr<ComponentWeights> take(const std::string & component, const std::string & key, std::string & why);
    // Weights a run is done with (parked: ComponentWeights::park), kept under `key` for the next run.
    void keep(const std::string & component, const std::string & key, std::unique_ptr<ComponentWeights> weights);
    // Runs that used `component`'s current entry, this one included (1 = built by this run).
    std::uint64_t runs(const std::string & component) const;
    void count_run(const std::string & component, bool reused);

    // The embeddings kept under `key` (copies: the caller may change them), or nullopt (a miss, counted).
    std::optional<NamedTensors> find_embeddings(const std::string & key);
    // Keeps host copies of `tensors` under `key`; evicts least recently used entries past the bound. An entry larger
    // than the whole bound is not kept.
    void keep_embeddings(const std::string & key, const NamedTensors & tensors);

    // {"keep_weights", "weights": {component: {"key", "runs", "held", "built", "reused", "misses"}}, "embeddings":
    //  {"bound_bytes", "bytes", "entries", "hits", "misses", "evictions"}}
    nlohmann::json to_json() const override;

private:
    explicit ModelSession(const SessionSlot & slot);
    struct Entry {
        std::string key;
        std::unique_ptr<ComponentWeights> weights;  // null while a run holds it
        std::uint64_t runs = 0, built = 0, reused = 0, misses = 0;
        nlohmann::json last_miss;
    };
    struct Embedding {
        std::string key;
        NamedTensors tensors;
        std::uint64_t bytes = 0;
    };
    SessionSlot keep_;  // the slot's settings (its state member unused)
    mutable std::mutex mu_;
    std::map<std::string, Entry> weights_;
    std::list<Embedding> embeddings_;  // most recently used first
    std::uint64_t embedding_bytes_ = 0, hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace ddo::model
