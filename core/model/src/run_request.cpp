#include "ddo/model/run_request.hpp"

#include <tuple>

#include "ddo/error.hpp"
#include "ddo/model/flow_match.hpp"

namespace ddo::model {

ImageSize floor_size(ModelRun & run, const Workload & w, std::int64_t multiple, const std::string & at_least_because,
                     const std::string & floored_because) {
    const ImageSize s{w.width / multiple * multiple, w.height / multiple * multiple};
    if (s.width < multiple || s.height < multiple)
        throw UsageError(run.plugin_name() + ": width and height must be at least " + std::to_string(multiple) + " " +
                         at_least_because);
    for (auto [key, req, eff] : {std::tuple{"workload.width", w.width, s.width}, std::tuple{"workload.height", w.height, s.height}})
        if (req != eff) run.adjust(key, req, eff, floored_because);
    return s;
}

std::optional<std::vector<float>> requested_sigmas(ModelRun & run, const Workload & w, const std::string & why) {
    if (!w.sigmas) return std::nullopt;
    auto grid = sigmas_from(*w.sigmas);  // an empty list is refused before anything is adjusted
    if (w.steps_set && w.steps != int(grid.size())) run.adjust("workload.steps", w.steps, int(grid.size()), why);
    return grid;
}

PromptSource PromptSource::of(const ModelRun & run, const Workload & w) {
    return {run.prompt_from_text(w), !run.prompt_embeds().empty(), run.encode_only()};
}

void PromptSource::require(const ModelRun & run, const std::string & no_prompt) const {
    if (!given() && !run.dry_run()) throw UsageError(no_prompt);
}

nlohmann::json PromptSource::prompt(const Workload & w) const {
    return from_text ? nlohmann::json(*w.prompt) : nlohmann::json(nullptr);
}

std::string PromptSource::embeddings(const std::string & encoder) const {
    if (from_text) return "encoded by the text encoder" + (encoder.empty() ? "" : " (" + encoder + ")");
    return have_embeds ? "supplied" : "none (dry run)";
}

std::string PromptSource::dry_run_summary() const {
    if (from_text && encode_only) return "dry run: checkpoint, tokenizer and text encoder validated; nothing computed";
    if (from_text) return "dry run: checkpoint, tokenizer, text encoder and prompt validated; nothing computed";
    return have_embeds ? "dry run: checkpoint and embeddings validated; nothing computed"
                       : "dry run: checkpoint validated (no prompt given); nothing computed";
}

nlohmann::json grid_json(const std::vector<float> & grid) {
    nlohmann::json a = nlohmann::json::array();
    for (float v : grid) a.push_back(double(v));
    return a;
}

}  // namespace ddo::model
