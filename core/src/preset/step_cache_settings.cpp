#include "ddo/preset/step_cache_settings.hpp"

#include <algorithm>
#include <cmath>
#include <regex>

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"

namespace ddo {
namespace {

using nlohmann::json;

constexpr double kFirstBlockThreshold = 0.05;  // FirstBlockCacheConfig.threshold
constexpr double kMagThreshold = 0.06;         // MagCacheConfig.threshold
constexpr double kSeaThreshold = 0.25;         // SeaCacheConfig.threshold

std::string where(const ResolvedSettings & s, const std::string & key) {
    return s.at(key).provenance.to_string();
}

bool is_set(const ResolvedSettings & s, const std::string & key) {
    return s.has(key) && !s.at(key).value.is_null() && s.at(key).provenance.layer != SettingLayer::builtin_default;
}

}  // namespace

const char * to_string(StepCacheKind k) {
    switch (k) {
    case StepCacheKind::off: return "off";
    case StepCacheKind::first_block: return "first_block";
    case StepCacheKind::mag: return "mag";
    case StepCacheKind::taylorseer: return "taylorseer";
    case StepCacheKind::sea: return "sea";
    }
    return "?";
}

StepCacheSettings StepCacheSettings::read(const ResolvedSettings & s) {
    StepCacheSettings c;
    const std::string kind = s.get_optional<std::string>("cache.kind").value_or("off");
    if (kind == "off") c.kind = StepCacheKind::off;
    else if (kind == "first_block") c.kind = StepCacheKind::first_block;
    else if (kind == "mag") c.kind = StepCacheKind::mag;
    else if (kind == "taylorseer") c.kind = StepCacheKind::taylorseer;
    else if (kind == "sea") c.kind = StepCacheKind::sea;
    else
        throw UsageError("cache.kind = \"" + kind + "\" (" + where(s, "cache.kind") +
                         "): give off, first_block, mag, taylorseer or sea (--cache KIND)");
    // Which keys each kind reads; a key set for another kind is refused rather than silently ignored.
    const std::map<std::string, std::vector<StepCacheKind>> owners = {
        {"cache.threshold", {StepCacheKind::first_block, StepCacheKind::mag, StepCacheKind::sea}},
        {"cache.residual_order", {StepCacheKind::sea}},
        {"cache.retention_steps", {StepCacheKind::sea}},
        {"cache.cache_end_steps", {StepCacheKind::sea}},
        {"cache.max_consecutive_cached", {StepCacheKind::sea}},
        {"cache.power_exp", {StepCacheKind::sea}},
        {"cache.max_skip_steps", {StepCacheKind::mag}},
        {"cache.retention_ratio", {StepCacheKind::mag}},
        {"cache.mag_ratios", {StepCacheKind::mag}},
        {"cache.calibrate", {StepCacheKind::mag}},
        {"cache.cache_interval", {StepCacheKind::taylorseer}},
        {"cache.disable_cache_before_step", {StepCacheKind::taylorseer}},
        {"cache.disable_cache_after_step", {StepCacheKind::taylorseer}},
        {"cache.max_order", {StepCacheKind::taylorseer}},
        {"cache.taylor_factors_dtype", {StepCacheKind::taylorseer}},
        {"cache.cache_identifiers", {StepCacheKind::taylorseer}},
        {"cache.skip_predict_identifiers", {StepCacheKind::taylorseer}},
        {"cache.use_lite_mode", {StepCacheKind::taylorseer}},
    };
    for (const auto & [key, kinds] : owners) {
        if (!is_set(s, key)) continue;
        if (std::find(kinds.begin(), kinds.end(), c.kind) != kinds.end()) {
            c.provenance[key] = where(s, key);
            continue;
        }
        std::string for_kinds;
        for (auto k : kinds) for_kinds += std::string(for_kinds.empty() ? "" : " or ") + to_string(k);
        throw UsageError(key + " = " + s.at(key).value.dump() + " (" + where(s, key) + ") applies to cache.kind " +
                         for_kinds + ", but cache.kind is " + kind + "; remove the key or set cache.kind");
    }
    for (const char * key : {"cache.kind", "cache.min_steps", "cache.allow_few_steps"})
        if (is_set(s, key)) c.provenance[key] = where(s, key);
    c.threshold = s.get_optional<double>("cache.threshold")
                      .value_or(c.kind == StepCacheKind::mag   ? kMagThreshold
                                : c.kind == StepCacheKind::sea ? kSeaThreshold
                                                               : kFirstBlockThreshold);
    c.residual_order = s.get_optional<int>("cache.residual_order").value_or(1);
    c.retention_steps = s.get_optional<int>("cache.retention_steps").value_or(1);
    c.cache_end_steps = s.get_optional<int>("cache.cache_end_steps").value_or(1);
    c.max_consecutive_cached = s.get_optional<int>("cache.max_consecutive_cached").value_or(2);
    c.power_exp = s.get_optional<double>("cache.power_exp").value_or(3.0);
    // SeaCacheConfig.__post_init__'s checks (the schema checks the ranges too; the kit never trusts a caller's table).
    if (c.residual_order != 0 && c.residual_order != 1)
        throw UsageError("cache.residual_order = " + std::to_string(c.residual_order) + ": give 0 or 1");
    if (c.retention_steps < 0 || c.cache_end_steps < 0 || c.max_consecutive_cached < 0)
        throw UsageError("cache.retention_steps, cache.cache_end_steps and cache.max_consecutive_cached take 0 or more");
    if (!std::isfinite(c.power_exp) || c.power_exp <= 0)
        throw UsageError("cache.power_exp = " + std::to_string(c.power_exp) + ": give a finite number > 0");
    if (!std::isfinite(c.threshold) || c.threshold < 0)  // the schema checks too; the kit never trusts a caller's table
        throw UsageError("cache.threshold = " + std::to_string(c.threshold) + ": give a finite number >= 0");
    c.max_skip_steps = s.get_optional<int>("cache.max_skip_steps").value_or(3);
    c.retention_ratio = s.get_optional<double>("cache.retention_ratio").value_or(0.2);
    c.mag_ratios = s.get_optional<std::vector<double>>("cache.mag_ratios").value_or(std::vector<double>{});
    c.calibrate = s.get_optional<bool>("cache.calibrate").value_or(false);
    c.min_steps = s.get_optional<int>("cache.min_steps").value_or(10);
    c.allow_few_steps = s.get_optional<bool>("cache.allow_few_steps").value_or(false);
    c.cache_interval = s.get_optional<int>("cache.cache_interval").value_or(5);
    c.disable_cache_before_step = s.get_optional<int>("cache.disable_cache_before_step").value_or(3);
    c.disable_cache_after_step = s.get_optional<int>("cache.disable_cache_after_step");
    c.max_order = s.get_optional<int>("cache.max_order").value_or(1);
    c.taylor_factors_dtype = s.get_optional<std::string>("cache.taylor_factors_dtype").value_or("bf16");
    auto patterns = [&](const char * key) {
        std::vector<std::string> out;
        if (!s.has(key) || s.at(key).value.is_null()) return out;
        const auto & v = s.at(key).value;
        if (v.is_string()) out.push_back(v.get<std::string>());
        else out = v.get<std::vector<std::string>>();
        for (const auto & p : out) {
            // std::regex compiles and matches recursively: a bound keeps a hostile pattern from the stack's limit.
            if (p.size() > 256 || std::count(p.begin(), p.end(), '(') > 16)
                throw UsageError(std::string(key) + " holds a pattern of " + std::to_string(p.size()) + " characters (" +
                                 where(s, key) + "); give patterns of at most 256 characters and 16 groups");
            try {
                std::regex re(p, std::regex::ECMAScript);
            } catch (const std::regex_error & e) {
                throw UsageError(std::string(key) + " holds \"" + p + "\" (" + where(s, key) +
                                 "), which is not a regular expression (" + e.what() +
                                 "); give patterns matched against whole diffusers module names, e.g. "
                                 "\"transformer_blocks\\\\.[0-9]+\\\\.attn\"");
            }
        }
        return out;
    };
    c.cache_identifiers = patterns("cache.cache_identifiers");
    c.skip_predict_identifiers = patterns("cache.skip_predict_identifiers");
    c.use_lite_mode = s.get_optional<bool>("cache.use_lite_mode").value_or(false);
    if (c.cache_interval < 1)
        throw UsageError("cache.cache_interval = " + std::to_string(c.cache_interval) + ": give 1 or more");
    if (c.disable_cache_before_step < 0)
        throw UsageError("cache.disable_cache_before_step = " + std::to_string(c.disable_cache_before_step) +
                         ": give 0 or more");
    if (c.disable_cache_after_step && *c.disable_cache_after_step < 0)
        throw UsageError("cache.disable_cache_after_step = " + std::to_string(*c.disable_cache_after_step) +
                         ": give 0 or more, or leave it unset");
    // TaylorSeerCacheHook computes step 0 only in the warm-up, on an interval of 1, or in a cool-down from step 0;
    // otherwise it would predict before anything was computed (diffusers raises there).
    if (c.kind == StepCacheKind::taylorseer && c.disable_cache_before_step == 0 && c.cache_interval != 1 &&
        !(c.disable_cache_after_step && *c.disable_cache_after_step == 0))
        throw UsageError("cache.disable_cache_before_step = 0 with cache.cache_interval = " +
                         std::to_string(c.cache_interval) + ": step 0 would be predicted before any step was computed; "
                         "give disable_cache_before_step >= 1 (default 3)");
    if (c.max_order < 0) throw UsageError("cache.max_order = " + std::to_string(c.max_order) + ": give 0 or more");
    if (c.taylor_factors_dtype != "bf16" && c.taylor_factors_dtype != "fp16" && c.taylor_factors_dtype != "fp32")
        throw UsageError("cache.taylor_factors_dtype = \"" + c.taylor_factors_dtype + "\": give bf16, fp16 or fp32");
    if (c.use_lite_mode && (!c.cache_identifiers.empty() || !c.skip_predict_identifiers.empty()))
        throw UsageError("cache.use_lite_mode = true (" + where(s, "cache.use_lite_mode") +
                         ") sets the modules itself (every block skipped, proj_out predicted); remove "
                         "cache.cache_identifiers / cache.skip_predict_identifiers, or lite mode");
    if (c.max_skip_steps < 1)
        throw UsageError("cache.max_skip_steps = " + std::to_string(c.max_skip_steps) + ": give 1 or more");
    if (!(c.retention_ratio >= 0 && c.retention_ratio <= 1))
        throw UsageError("cache.retention_ratio = " + std::to_string(c.retention_ratio) + ": give a number in [0, 1]");
    for (double r : c.mag_ratios)
        if (!std::isfinite(r) || r < 0)
            throw UsageError("cache.mag_ratios holds " + std::to_string(r) + ": give finite ratios >= 0");
    if (c.kind == StepCacheKind::mag && c.calibrate && !c.mag_ratios.empty())
        throw UsageError("cache.calibrate = true (" + where(s, "cache.calibrate") + ") with cache.mag_ratios (" +
                         where(s, "cache.mag_ratios") + "): a calibration run computes every step and measures the "
                         "ratios, it does not use given ones; remove one of the two keys");
    if (c.kind == StepCacheKind::mag && !c.calibrate && c.mag_ratios.empty())
        throw UsageError("cache.kind = mag needs cache.mag_ratios (the checkpoint's per-step magnitude ratios); measure "
                         "them once with --set cache.calibrate=true, which writes mag_ratios.toml beside the outputs "
                         "for a preset to inherit");
    return c;
}

json StepCacheSettings::to_json() const {
    json j = {{"kind", to_string(kind)}, {"min_steps", min_steps}, {"allow_few_steps", allow_few_steps}};
    if (kind == StepCacheKind::first_block) j["threshold"] = threshold;
    if (kind == StepCacheKind::mag) {
        j["threshold"] = threshold;
        j["max_skip_steps"] = max_skip_steps;
        j["retention_ratio"] = retention_ratio;
        j["calibrate"] = calibrate;
        j["mag_ratios"] = mag_ratios.empty() ? json(nullptr) : json(mag_ratios);
    }
    if (kind == StepCacheKind::sea) {
        j["threshold"] = threshold;
        j["residual_order"] = residual_order;
        j["retention_steps"] = retention_steps;
        j["cache_end_steps"] = cache_end_steps;
        j["max_consecutive_cached"] = max_consecutive_cached;
        j["power_exp"] = power_exp;
    }
    if (kind == StepCacheKind::taylorseer) {
        j["cache_interval"] = cache_interval;
        j["disable_cache_before_step"] = disable_cache_before_step;
        j["disable_cache_after_step"] = disable_cache_after_step ? json(*disable_cache_after_step) : json(nullptr);
        j["max_order"] = max_order;
        j["taylor_factors_dtype"] = taylor_factors_dtype;
        j["cache_identifiers"] = cache_identifiers;
        j["skip_predict_identifiers"] = skip_predict_identifiers;
        j["use_lite_mode"] = use_lite_mode;
    }
    j["source"] = provenance;
    return j;
}

}  // namespace ddo
