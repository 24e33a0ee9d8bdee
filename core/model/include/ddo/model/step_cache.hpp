// Step caching (cache.* in docs/presets.md; Note [Step caching] in docs/architecture.md): reuse transformer work
// between denoising steps, as diffusers' hooks do (FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig,
// SeaCacheConfig), and skip the blocks' weights with their compute. The kit owns the method's state and decisions; a
// plugin hands its block loop to StepCache::run, which calls back to compute a block or to skip it (the engine then
// neither acquires nor streams that block's execution group: ComponentWeights::skip).
//
//   auto * cache = run.step_cache(steps);             // null: cache.kind = off (the loop is as before)
//   x = cache->run("cond", step, {x}, blocks,
//                  [&](int64_t i, const Streams & in) { acquire i; auto y = block(i, in); release i; return y; },
//                  [&](int64_t i) { return weights.skip(i); });
//
// taylorseer hooks modules by their diffusers names: the plugin declares which it can route (bind_modules, before
// the first pass), names its blocks in run(..., "transformer_blocks"), and calls module() where a hooked module
// (an attention, proj_out) runs inside its math:
//   auto y = cache->module(branch, "transformer_blocks.3.attn", [&] { return Outputs{attn(...)}; }).outputs;
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddo/preset/step_cache_settings.hpp"

namespace ddo::model {

// cache.* as a run resolved them (core: ddo/preset/step_cache_settings.hpp).
using ddo::StepCacheKind;
using ddo::StepCacheSettings;

// The hidden-state streams one block takes and returns, in the block's order; stream 0 is the one whose residual is
// the cache's signal (the image tokens, or the joint sequence of a single-stream block).
using Streams = std::vector<at::Tensor>;

// diffusers' nearest_interp: `ratios` resampled to `length` entries, computed in float32 as torch does.
std::vector<float> nearest_interp(const std::vector<double> & ratios, int length);

// The tensors one module call returns, in its order (a tuple's members).
using Outputs = std::vector<at::Tensor>;

// One call of a module through the cache: its outputs, computed or predicted.
struct ModuleCall {
    Outputs outputs;
    bool computed = true;
};

class StepCache {
public:
    // steps: the run's denoising steps. UsageError (exit 2) naming cache.min_steps for a shorter schedule (unless
    // cache.allow_few_steps), and cache.mag_ratios for mag without ratios and without calibrate.
    StepCache(StepCacheSettings settings, int steps);

    using ComputeFn = std::function<Streams(std::int64_t block, const Streams & in)>;
    // Block `block` does not run in this pass; returns the bytes of its weights that were therefore not streamed.
    using SkipFn = std::function<std::uint64_t(std::int64_t block)>;

    // One pass of the block stack [0, blocks) for guidance branch `branch` (state is kept per branch, as diffusers
    // keeps it per cache_context) at denoising step `step` (0-based). Returns the streams after the last block.
    // taylorseer names block i "<block_prefix>.<i>" (diffusers' ModuleList name): a hooked block that predicts is
    // skipped (not computed, not streamed) and its predicted outputs go on.
    Streams run(const std::string & branch, int step, Streams x, std::int64_t blocks, const ComputeFn & compute,
                const SkipFn & skip, const std::string & block_prefix = "transformer_blocks");

    // taylorseer: the diffusers module names this plugin routes through module() / run() (`hookable`), and every
    // module name of the checkpoint (`modules`, e.g. each weight name's prefixes). Resolves cache_identifiers /
    // skip_predict_identifiers (or diffusers' defaults, or lite mode) against them; UsageError (exit 2) naming the key
    // for a pattern that matches a module the plugin cannot hook or matches nothing, and when no module is hooked.
    // Call once, before the first pass; other kinds ignore it.
    void bind_modules(const std::vector<std::string> & hookable, const std::vector<std::string> & modules);
    // taylorseer: whether `module` is hooked (false for every other kind).
    bool hooked(const std::string & module) const;
    // taylorseer: one call of hooked module `module` in guidance branch `branch`: `compute` runs (and the expansion's
    // factors are updated) on a full step, or the outputs are predicted. A module that is not hooked just computes.
    ModuleCall module(const std::string & branch, const std::string & module, const std::function<Outputs()> & compute);

    // sea: what the next pass of `branch` is gated on, as diffusers' SeaCache reads it from the pipeline's
    // cache_context and raw_vision_callback: the scheduler's sigma of this step (the float32 value), and the visual
    // latents the output is made of, one (C, T, H, W) tensor per sample. Call before each run() of the branch;
    // other kinds ignore it.
    void observe(const std::string & branch, double sigma, Streams raw_vision);

    const StepCacheSettings & settings() const noexcept { return s_; }
    // Note [Memory forecast]: the bytes this cache keeps between passes for one guidance branch, for a block stack
    // whose streams have `streams` shapes (stream 0 first) in `dtype`: first_block the head block's output streams, its
    // residual and the tail's residuals; mag stream 0's residual; sea residual_order + 1 full passes' auxiliary streams
    // and stream 0's residuals; taylorseer max_order + 1 factors per hooked module (after bind_modules), each of stream
    // 0's shape (a module's output) in cache.taylor_factors_dtype. Not counted: sea's filtered latents (the latents'
    // size, beside the hidden states' hundreds of times larger).
    std::uint64_t kept_bytes(const std::vector<std::vector<std::int64_t>> & streams, at::ScalarType dtype) const;
    // The blocks every pass runs (first_block: block 0; mag reuses whole passes: none), for the planner to keep
    // resident first (ComponentPlan::resident_first).
    std::vector<std::int64_t> always_run() const;
    int steps() const noexcept { return steps_; }
    // The per-pass records since the last call (ModelRun::step puts them in the step's report entry).
    nlohmann::json take_step_records();
    // {"kind", settings, "passes", "computed_block_fraction", "bytes_not_streamed", "memory", "fired", ...}
    nlohmann::json summary() const;
    // mag with calibrate: the measured ratios per branch, in the order the branches first ran.
    std::vector<std::pair<std::string, std::vector<double>>> calibration() const;
    // Clears every branch's state (a new generation on the same weights; diffusers resets at the last step).
    void reset();

private:
    struct Branch;
    Branch & branch(const std::string & name);
    Streams run_first_block(Branch & b, nlohmann::json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                            const SkipFn & skip);
    Streams run_mag(Branch & b, nlohmann::json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                    const SkipFn & skip);
    Streams run_sea(Branch & b, nlohmann::json & rec, int step, Streams x, std::int64_t blocks, const ComputeFn & compute,
                    const SkipFn & skip);
    Streams run_taylorseer(Branch & b, nlohmann::json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                           const SkipFn & skip, const std::string & block_prefix);
    void account_memory();

    StepCacheSettings s_;
    int steps_;
    std::vector<float> ratios_;  // mag: interpolated to steps_
    struct Hook {
        bool inactive = false;  // skip_predict: zeros of the recorded shapes when predicting
    };
    std::map<std::string, Hook> hooks_;         // taylorseer: module name -> its hook (after bind_modules)
    std::vector<std::string> hook_order_;       // taylorseer: hooked modules in the order first called
    bool bound_ = false;
    std::uint64_t module_calls_ = 0, module_predicted_ = 0;
    std::vector<std::pair<std::string, std::shared_ptr<Branch>>> branches_;
    nlohmann::json pending_ = nlohmann::json::array();
    std::uint64_t passes_ = 0, reused_passes_ = 0, block_steps_ = 0, computed_block_steps_ = 0;
    std::uint64_t bytes_not_streamed_ = 0, memory_bytes_ = 0, peak_memory_bytes_ = 0;
};

}  // namespace ddo::model
