// The LoRA adapters of a run (issue 27; Note [Applying LoRA] in docs/architecture.md): the files given
// (lora.adapters, --lora FILE[:STRENGTH]), opened and matched against every component the run reads before anything
// is computed (strict: a key that adapts nothing is an error unless lora.allow_unmatched), and the factors of one
// component as a LoraDelta per adapted module, read when the component's weights open and applied at run time by
// model::linear. The stored weights are never changed: dense, quantized and streamed alike.
//
//   auto loras = LoraAdapters::open({parse_lora_request("style.safetensors:0.7", "--lora")});
//   loras.match("transformer", encodings, renames);          // each component the run reads
//   loras.check(/*allow_unmatched=*/false);                  // UsageError: "0 of 240 modules match ..."
//   auto deltas = loras.load("transformer", at::kBFloat16, device);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "ddo/model/linear.hpp"
#include "ddo/store/lora_file.hpp"
#include "ddo/store/weight_encoding.hpp"

namespace ddo::model {

// One LoRA the run applies.
struct LoraRequest {
    std::filesystem::path path;
    double strength = 1.0;
    std::string component = "transformer";  // the component a file's bare (unprefixed) keys adapt
};

// "PATH", "PATH:STRENGTH" or "PATH:STRENGTH:COMPONENT", read from the right (a path may hold ':'). UsageError naming
// `key` (where the text came from) for an empty path or a strength that is no finite number.
LoraRequest parse_lora_request(const std::string & text, const std::string & key);

// The deltas of one component: its weight tensor's name ("<module>.weight") -> the module's factors.
struct ComponentLora {
    std::string component;
    std::unordered_map<std::string, LoraDelta> deltas;
    std::uint64_t bytes = 0;  // of every factor, wherever it lies
    std::uint64_t moved = 0;  // modules whose factors attach() moved to their weight's device
    double read_s = 0;        // reading and stacking the factors (host steady clock)
    // lora.apply = "merge": ComponentWeights adds B·A once into the weights of resident groups (the rest stays at run
    // time); what it merged, the merged copies' bytes and the host time it took.
    bool merge = false;
    std::uint64_t merged_bytes = 0;
    double merge_s = 0;

    const LoraDelta * find(std::string_view weight) const;
    // The factors of `weight` (its name) for the tensor `on` that holds it, moved to `on`'s device when they are
    // elsewhere (a plugin's weights held outside the engine, e.g. on the host while the run's device is CUDA), and
    // marked handed out; null when no LoRA adapts it. The one way a plugin pairs factors with a weight it holds itself
    // (the engine's groups hand out factors on their own device), so a LoRA term never meets a weight on another device.
    const LoraDelta * attach(std::string_view weight, const at::Tensor & on);
    // {"how" ("runtime", "merged" or "merged and runtime"), "how_reason", "modules", "bytes", "read_s", "applied"
    // (modules whose term was added at run time), "merged" (modules merged into their resident weight), "merged_bytes",
    // "merge_s", "not_applied" (handed out, neither added nor merged: the plugin read those weights without
    // model::linear; must be empty)}.
    nlohmann::json to_json() const;
};

class LoraAdapters {
public:
    LoraAdapters() = default;
    // Opens every file (store::LoraFile::open: UsageError for what is not a LoRA ddo applies, RuntimeError for a
    // damaged file, each naming it).
    static LoraAdapters open(const std::vector<LoraRequest> & requests);

    bool empty() const noexcept { return files_.empty(); }
    // Matches every file's layers for `component` against its Linear modules (the 2-D "<module>.weight" tensors
    // `encodings` offers), trying `renames` (the model's original names, ComponentSource::renames) for a name that
    // matches nothing as spelled. RuntimeError (exit 4) naming module, file and shapes for a factor that does not fit.
    void match(const std::string & component, const store::ComponentEncodings & encodings,
               const std::vector<std::pair<std::string, std::string>> & renames = {});
    // Once every component the run reads was matched: the files' modules that adapt nothing (no such module, or a
    // component the run does not read). Strict: UsageError (exit 2) naming each file, how many of its modules match
    // nothing (the first five) and how many matched. allow_unmatched: the same lines, returned as warnings.
    std::vector<std::string> check(bool allow_unmatched) const;

    // The factors of `component` in `dtype` on `device` (read from the files now), null when no LoRA adapts it.
    // merge: lora.apply = "merge" (ComponentLora::merge).
    std::shared_ptr<ComponentLora> load(const std::string & component, at::ScalarType dtype, c10::Device device,
                                        bool merge = false) const;

    // The report's "loras": per file its identity (store::file_identity with sha256), format, ranks, alpha policy,
    // strength, and per component the modules matched and unmatched.
    nlohmann::json to_json() const;

private:
    struct File {
        LoraRequest request;
        store::LoraFile lora;
        nlohmann::json identity;
        std::map<std::string, store::LoraMatch> matches;  // component -> its match
    };
    std::vector<File> files_;
};

}  // namespace ddo::model
