#include "kv_cache_policy.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/memory_budget.hpp"

namespace ddo::qwen_image_21 {
namespace {

// Transformer prefix tokens of one row: every VLM token, a reference slot expanded to its 2x2 latent tokens.
std::int64_t prefix_tokens(const at::Tensor & embeds, const std::optional<at::Tensor> & pads) {
    const std::int64_t slots = pads ? pads->select(0, 0).sum().item<std::int64_t>() : 0;
    return embeds.size(1) + 3 * slots;
}

}  // namespace

std::uint64_t kv_cache_bytes(const TransformerConfig & c, const PromptEmbeds & e, bool guide, at::ScalarType dtype) {
    const std::uint64_t per_token = 2ull * std::uint64_t(c.inner_dim()) * at::elementSize(dtype) * std::uint64_t(c.num_layers);
    std::uint64_t tokens = std::uint64_t(e.embeds.size(0) * prefix_tokens(e.embeds, e.image_pad_mask));
    if (guide && e.neg_embeds) tokens += std::uint64_t(e.neg_embeds->size(0) * prefix_tokens(*e.neg_embeds, e.neg_image_pad_mask));
    return tokens * per_token;
}

std::string kv_cache_placement_setting(model::ModelRun & run, at::Device device) {
    const auto v = run.option<std::string>("kv_cache_placement", "auto");
    if (v != "auto" && v != "device" && v != "host")
        throw UsageError("plugin.qwen_image_21.kv_cache_placement = \"" + v + "\": give auto, device or host (where "
                         "the prefix KV cache lives between steps)");
    if (v == "host" && !device.is_cuda())
        throw UsageError("plugin.qwen_image_21.kv_cache_placement = \"host\": this run computes on the CPU, whose "
                         "memory is the host's already; use auto or device");
    return v;
}

KvCachePlacement place_kv_cache(const std::string & requested, const model::ComponentPlan & transformer,
                                const TransformerConfig & c, const PromptEmbeds & e, const PipelineOptions & o,
                                bool guide) {
    KvCachePlacement p;
    p.requested = requested;
    p.used = o.use_kv_cache && c.causal_condition;
    if (!p.used) {
        p.where = "none";
        p.reason = !o.use_kv_cache ? "plugin.qwen_image_21.use_kv_cache = false" : "causal_condition = false";
        return p;
    }
    p.estimate_bytes = kv_cache_bytes(c, e, guide, o.dtype);
    const bool cuda = o.device.is_cuda();
    if (!cuda) {
        p.where = "device";
        p.reason = "the CPU computes in host memory";
        return p;
    }
    if (p.requested == "device" || p.requested == "host") {
        p.on_host = p.requested == "host";
        p.reason = "plugin.qwen_image_21.kv_cache_placement = " + p.requested;
    } else {
        // The cache stays on the device when it takes at most half of what is free there: the other half is left to
        // the step's activations and the streamed blocks' slots.
        const auto budget = model::device_memory_available(transformer);
        p.budget = budget.to_json();
        p.on_host = !budget.bytes || p.estimate_bytes > *budget.bytes / 2;
        p.reason = !budget.bytes ? "device memory unknown (" + budget.source + "): host, the bounded choice"
                   : p.on_host   ? "more than half of the device's available memory"
                                 : "fits in half of the device's available memory";
    }
    p.pinned = p.on_host && transformer.capacities.pin_host_memory;
    p.where = !p.on_host ? "device" : p.pinned ? "host (pinned)" : "host";
    return p;
}

nlohmann::json kv_cache_json(const KvCachePlacement & p, const KvCacheStats & s) {
    nlohmann::json j = {{"used", p.used},         {"requested", p.requested},     {"where", p.where},
                        {"reason", p.reason},     {"estimate_bytes", p.estimate_bytes}};
    if (!p.budget.is_null()) j["budget"] = p.budget;
    if (p.used)
        j.update({{"bytes", s.bytes}, {"prefix_tokens", s.prefix_tokens}, {"extracts", s.extracts}, {"hits", s.hits},
                  {"bytes_to_device", s.bytes_to_device}});
    return j;
}

}  // namespace ddo::qwen_image_21
