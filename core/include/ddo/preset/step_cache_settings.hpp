// cache.* resolved and checked (docs/presets.md, [cache]; Note [Step caching] in docs/architecture.md): which step
// cache a run asked for, with each kind's parameters under diffusers' names and defaults. Torch-free, so that the
// preset fuzz target checks what a run would refuse; the cache itself is the model kit's (ddo/model/step_cache.hpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo {

class ResolvedSettings;

enum class StepCacheKind { off, first_block, mag, taylorseer, sea };
const char * to_string(StepCacheKind k);

// cache.*, resolved and checked. A key that belongs to another kind than cache.kind is refused, not ignored.
struct StepCacheSettings {
    StepCacheKind kind = StepCacheKind::off;
    double threshold = 0;            // cache.threshold (first_block: 0.05, mag: 0.06, sea: 0.25 when unset)
    int max_skip_steps = 3;          // mag: consecutive steps reused at most
    double retention_ratio = 0.2;    // mag: the first round(retention_ratio * steps) steps are always computed
    std::vector<double> mag_ratios;  // mag: per-step magnitude ratios (interpolated to the run's steps)
    bool calibrate = false;          // mag: compute every step, measure the ratios, write them out
    // taylorseer (TaylorSeerCacheConfig): module outputs predicted by a Taylor expansion between full computations.
    int cache_interval = 5;                      // full computation every cache_interval steps after the warm-up
    int disable_cache_before_step = 3;           // steps [0, this) compute and gather the expansion's factors
    std::optional<int> disable_cache_after_step; // steps >= this compute, with no update of the factors (unset: none)
    int max_order = 1;                           // highest order of the expansion
    std::string taylor_factors_dtype = "bf16";   // the factors' storage: bf16 | fp16 | fp32
    std::vector<std::string> cache_identifiers;       // module-name patterns predicted (empty: diffusers' attention set)
    std::vector<std::string> skip_predict_identifiers; // module-name patterns that return zeros when predicting
    bool use_lite_mode = false;                  // blocks skipped (zeros), proj_out predicted
    // sea (SeaCacheConfig): the whole block stack reused by the accumulated change of the spectrally filtered latents.
    int residual_order = 1;          // 0: the last residual; 1: extrapolated from the last two full passes
    int retention_steps = 1;         // the first steps always compute
    int cache_end_steps = 1;         // the last steps always compute
    int max_consecutive_cached = 2;  // passes reused in a row at most (0: no limit)
    double power_exp = 3.0;          // the clean-signal power prior's exponent
    int min_steps = 10;              // a schedule shorter than this is refused (unless allow_few_steps)
    bool allow_few_steps = false;
    std::map<std::string, std::string> provenance;  // key -> where its value came from (set keys only)

    // From the resolved settings; UsageError (exit 2) naming the key, what was given and what is accepted.
    static StepCacheSettings read(const ResolvedSettings & settings);
    nlohmann::json to_json() const;
};

}  // namespace ddo
