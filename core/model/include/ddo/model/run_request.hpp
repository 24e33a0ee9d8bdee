// What every model plugin's run resolves from its request the same way, written once (docs/architecture.md,
// "Writing a model plugin"): the image size floored to the model's multiple, the grid workload.sigmas asks for,
// where the prompt comes from (with the report's fields for it and a dry run's summary line), and a float grid as
// report JSON. Each plugin keeps its own words for why (the reasons are arguments).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/model/model_run.hpp"

namespace ddo::model {

struct ImageSize {
    std::int64_t width = 0, height = 0;
};

// workload.width / workload.height floored to a multiple of `multiple`, each change recorded (ModelRun::adjust)
// with `floored_because`. UsageError "<plugin>: width and height must be at least <multiple> <at_least_because>"
// when a floored side is smaller than `multiple`.
ImageSize floor_size(ModelRun & run, const Workload & w, std::int64_t multiple, const std::string & at_least_because,
                     const std::string & floored_because);

// workload.sigmas as the float32 grid (sigmas_from), an explicit workload.steps of another length adjusted to its
// length with `why`; nullopt when workload.sigmas is unset.
std::optional<std::vector<float>> requested_sigmas(ModelRun & run, const Workload & w, const std::string & why);

// Where the run's prompt comes from, checked by ModelRun::prompt_from_text.
struct PromptSource {
    bool from_text = false;    // workload.prompt (-p): the checkpoint's text encoder encodes it
    bool have_embeds = false;  // --prompt-embeds FILE
    bool encode_only = false;  // ddo-host encode

    static PromptSource of(const ModelRun & run, const Workload & w);
    bool given() const noexcept { return from_text || have_embeds; }
    // UsageError `no_prompt` (what to give) when there is no prompt and the run is not a dry run.
    void require(const ModelRun & run, const std::string & no_prompt) const;
    // The report's "prompt": the text, or null for embeddings.
    nlohmann::json prompt(const Workload & w) const;
    // The report's "prompt_embeddings": "encoded by the text encoder (<encoder>)" (no parentheses for an empty
    // name), "supplied" or "none (dry run)".
    std::string embeddings(const std::string & encoder = "") const;
    // What a dry run validated: "dry run: ... validated; nothing computed".
    std::string dry_run_summary() const;
};

// A sigma (or timestep) grid as the report's JSON array of doubles.
nlohmann::json grid_json(const std::vector<float> & grid);

}  // namespace ddo::model
