// Where the prefix KV cache lives (plugin.qwen_image_21.kv_cache_placement = auto | device | host): its size
// estimated before the first step from the prefix (text tokens + 4 latent tokens per reference slot), and `auto`
// deciding against the device memory still available when denoising starts. Note [Qwen-Image 2.1 prefix cache]
// in docs/architecture.md.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config.hpp"
#include "ddo/model/component_plan.hpp"
#include "ddo/model/model_run.hpp"
#include "pipeline.hpp"

namespace ddo::qwen_image_21 {

struct KvCachePlacement {
    bool used = false;          // use_kv_cache and causal_condition
    bool on_host = false;
    bool pinned = false;
    std::string requested;      // the setting
    std::string where;          // "device" | "host (pinned)" | "host" | "none"
    std::string reason;
    std::uint64_t estimate_bytes = 0;
    nlohmann::json budget;      // MemoryBudget::to_json of the device when `auto` decided
};

// K + V bytes of every layer for the prefix of `embeds` (and of the negative prompt's when guiding) at `dtype`.
std::uint64_t kv_cache_bytes(const TransformerConfig & c, const PromptEmbeds & embeds, bool guide,
                             at::ScalarType dtype);

// plugin.qwen_image_21.kv_cache_placement, checked before anything loads: UsageError for a value other than
// auto | device | host, and for `host` on a run whose device is the CPU (its memory is the host's already).
std::string kv_cache_placement_setting(model::ModelRun & run, at::Device device);

// `requested` from kv_cache_placement_setting; the estimate from the embeddings, `auto` decided now.
KvCachePlacement place_kv_cache(const std::string & requested, const model::ComponentPlan & transformer,
                                const TransformerConfig & c, const PromptEmbeds & embeds, const PipelineOptions & o,
                                bool guide);

// The report's counters.transformer.kv_cache: the plan and what the run did (bytes, hits).
nlohmann::json kv_cache_json(const KvCachePlacement & p, const KvCacheStats & s);

}  // namespace ddo::qwen_image_21
