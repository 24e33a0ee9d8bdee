// ComponentWeights: the weights of one component (DiT blocks, text-encoder layers, VAE leaves) as an ordered list
// of execution groups, opened from a diffusers/transformers component folder (one *.safetensors or a sharded
// *.safetensors.index.json, via store::WeightStore), planned by the core planner from the ComponentPlan, streamed
// by the offload engine on the plan's device, and viewed as at::Tensor. Every route the engine runs is available
// (resident | component | dynamic | disk | group_block | group_leaf); a plugin writes only which tensors form each
// group. `component` uploads every group when the phase begins and frees them when it ends (unload).
//
//   auto w = run.open_weights("transformer", dir, groups, at::kBFloat16);
//   const auto & t = w->acquire(i);          // t.at("transformer_blocks.3.attn.to_q.weight")
//   ... compute ...
//   w->release(i);
//   run.unload(std::move(w));                // end of phase: outstanding owners must be 0
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_plan.hpp"
#include "ddo/model/linear.hpp"
#include "ddo/model/lora_adapters.hpp"
#include "ddo/model/memory_forecast.hpp"
#include "ddo/store/component_source.hpp"

namespace ddo::model {

// One execution group: a name for reports and errors, and the tensors it holds (checkpoint names).
struct GroupSpec {
    std::string name;
    std::vector<std::string> tensors;
};

// The tensors of an acquired group, on the plan's device in the compute dtype. Valid until release().
class GroupTensors {
public:
    // Throws RuntimeError naming the tensor and the group when absent.
    const at::Tensor & at(std::string_view name) const;
    bool contains(std::string_view name) const { return map_.count(std::string(name)) != 0; }
    const std::string & group() const noexcept { return group_; }
    // The LoRA factors adapting weight tensor `name` ("<module>.weight"), or null (Note [Applying LoRA]).
    // Null too for a module whose LoRA was merged into this weight (lora.apply = "merge").
    const LoraDelta * lora(std::string_view name) const {
        return lora_ && !merged_.count(std::string(name)) ? lora_->find(name) : nullptr;
    }
    // Linear module `module`: "<module>.weight", "<module>.bias" when `bias`, and its LoRA.
    Linear linear(const std::string & module, bool bias = false) const;

private:
    friend class ComponentWeights;
    std::string group_;
    std::unordered_map<std::string, at::Tensor> map_;
    const ComponentLora * lora_ = nullptr;  // borrowed from the ComponentWeights
    std::unordered_set<std::string> merged_;  // weights whose LoRA is merged into the tensor handed out
};

class ComponentWeights {
public:
    // source: the component folder, or a file replacing its weights (Note [Component files]). lora: the component's
    // LoRA factors (LoraAdapters::load; null: none), kept on the device beside the plan, whose device budget they
    // reduce, and handed out with each group (GroupTensors::lora). Throws UsageError when no allocator plugin was
    // loaded, RuntimeError naming file and tensor for a tensor missing from the checkpoint.
    static std::unique_ptr<ComponentWeights> open(const store::ComponentSource & source, std::vector<GroupSpec> groups,
                                                  const ComponentPlan & plan, at::ScalarType compute_dtype,
                                                  std::shared_ptr<ComponentLora> lora = nullptr);
    ~ComponentWeights();
    ComponentWeights(const ComponentWeights &) = delete;
    ComponentWeights & operator=(const ComponentWeights &) = delete;

    const std::string & component() const noexcept;
    std::size_t size() const noexcept;  // execution groups declared

    // Begins the engine phase `name` (host copies, resident uploads); idempotent. ModelRun calls it when a run
    // phase begins; otherwise the first acquire begins a phase named after the component.
    void begin_phase(std::string_view name);
    // Group i's tensors: views into the engine's slot or resident buffer when the stored dtype is the compute
    // dtype, converted otherwise. The first acquire begins the engine phase (host copies, resident uploads).
    const GroupTensors & acquire(std::size_t i);
    void release(std::size_t i);
    // Group i does not run in this pass (a step cache reuses its output; Note [Step caching]): the engine acquires
    // and streams nothing for it. Returns the bytes of its weights that stream (0 for a resident group, and for a
    // member of a shared engine group another member of this pass acquired). UsageError while i is acquired.
    std::uint64_t skip(std::size_t i);

    std::string route() const;              // the route the engine executes
    std::uint64_t bytes_streamed() const;   // bytes moved to the compute device or read from disk so far
    // bytes_streamed() and the compute time spent waiting for uploads so far, from one read of the engine's
    // counters (ModelRun records both per step). stall_s is nullopt, with the reason, where the transport never
    // blocks the host (CUDA: the compute stream waits on events).
    struct Progress {
        std::uint64_t bytes_streamed = 0;
        std::optional<double> stall_s;
        std::string stall_reason;
    };
    Progress progress() const;
    // Ends the engine phase; returns the outstanding owners (must be 0). Idempotent.
    std::uint64_t finish();
    // Ends a run that leaves these weights loaded for the next one (model_session.hpp): as finish(), but the residents
    // converted or decoded once and the LoRA-merged weights stay (route `component` frees its residents at each
    // phase end, so there they go too). Returns the outstanding owners (must be 0).
    std::uint64_t park();
    // The next run takes these parked weights: the engine's counters of what moved (Engine::restart_counters) and the
    // conversion and decode counters start again from 0; its first phase begins without uploading, copying or
    // converting again what was kept.
    void resume();
    // What the weights hold for a next run: {"resident_groups", "resident_bytes" (planned resident, route component:
    // 0), "mapped_bytes", "host_copy_bytes" (pinned + pageable), "converted_groups", "converted_bytes"}.
    nlohmann::json held() const;
    // Note [Memory forecast]: what the plan will hold, and what the engine holds now, outside LibTorch's allocator:
    // device = the residents and slots (on the host transport, residents read in place from the file mapping too,
    // unless they are converted once: those are LibTorch tensors); host = pinned and pageable host copies and the disk route's
    // staging buffers. The plan's device bytes include the LoRA factors and the residents converted once (LibTorch
    // tensors: the measured side counts them in LibTorch's allocations, not here).
    Footprint planned_footprint() const;
    Footprint footprint() const;
    // {"route", "bytes_streamed", "execution_groups", "placement", "conversion", "quantization" (formats and counts
    // of the declared tensors, stored and dense bytes, dequant_s and its clock), "lora" (ComponentLora::to_json, null
    // without one), "engine": Engine::to_json()}
    nlohmann::json report() const;

    // Called once from the destructor (never throws out of it): ModelRun records the counters of weights that
    // were destroyed without unload() (a failed or interrupted run). Empty: nothing.
    void set_on_destroy(std::function<void(const ComponentWeights &)> hook);

    struct Impl;

private:
    ComponentWeights();
    nlohmann::json conversion_json() const;    // report()'s "conversion" (Note [Converted residents])
    nlohmann::json quantization_json() const;  // report()'s "quantization" (Note [Quantized weights])
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::model
