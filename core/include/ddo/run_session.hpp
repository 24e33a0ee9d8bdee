// ddo::RunSession: what one process keeps between the runs it makes (`ddo-host serve`): the weights a run left loaded
// and the prompt embeddings it encoded (Note [Serving], "Weight reuse"). The host owns the slot and says what may be
// kept; the model kit makes and reads the state (ddo/model/model_session.hpp), so the host, which links no LibTorch,
// holds it opaquely. A CLI run has no slot: it keeps nothing, as before.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo {

class RunSession {
public:
    virtual ~RunSession() = default;
    // What is kept and what was reused so far: entries, bytes, hits and misses (the serve summary, GET /v1/models).
    virtual nlohmann::json to_json() const = 0;
};

struct SessionSlot {
    // Components whose weights stay loaded between runs ("all": every component a run opens on the engine; empty:
    // none). A component the run does not name is freed at its unload, as in a CLI run.
    std::vector<std::string> keep_weights{"all"};
    // The prompt-embeddings cache's bound (least recently used entries go first); 0: no cache.
    std::uint64_t embeddings_cache_bytes = 256ull << 20;
    // Made by the kit on the first run that sees this slot; destroyed by the slot's owner (the plugin that made it
    // stays loaded for the process: Note [Plugin unloading]).
    std::unique_ptr<RunSession> state;

    bool keeps(const std::string & component) const {
        for (const auto & c : keep_weights)
            if (c == "all" || c == component) return true;
        return false;
    }
};

}  // namespace ddo
