#include "ddo/preset/step_cache_settings.hpp"

#include <algorithm>
#include <cmath>

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"

namespace ddo {
namespace {

using nlohmann::json;

constexpr double kFirstBlockThreshold = 0.05;  // FirstBlockCacheConfig.threshold
constexpr double kMagThreshold = 0.06;         // MagCacheConfig.threshold

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
    }
    return "?";
}

StepCacheSettings StepCacheSettings::read(const ResolvedSettings & s) {
    StepCacheSettings c;
    const std::string kind = s.get_optional<std::string>("cache.kind").value_or("off");
    if (kind == "off") c.kind = StepCacheKind::off;
    else if (kind == "first_block") c.kind = StepCacheKind::first_block;
    else if (kind == "mag") c.kind = StepCacheKind::mag;
    else
        throw UsageError("cache.kind = \"" + kind + "\" (" + where(s, "cache.kind") +
                         "): give off, first_block or mag (--cache KIND)");
    // Which keys each kind reads; a key set for another kind is refused rather than silently ignored.
    const std::map<std::string, std::vector<StepCacheKind>> owners = {
        {"cache.threshold", {StepCacheKind::first_block, StepCacheKind::mag}},
        {"cache.max_skip_steps", {StepCacheKind::mag}},
        {"cache.retention_ratio", {StepCacheKind::mag}},
        {"cache.mag_ratios", {StepCacheKind::mag}},
        {"cache.calibrate", {StepCacheKind::mag}},
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
                      .value_or(c.kind == StepCacheKind::mag ? kMagThreshold : kFirstBlockThreshold);
    if (!std::isfinite(c.threshold) || c.threshold < 0)  // the schema checks too; the kit never trusts a caller's table
        throw UsageError("cache.threshold = " + std::to_string(c.threshold) + ": give a finite number >= 0");
    c.max_skip_steps = s.get_optional<int>("cache.max_skip_steps").value_or(3);
    c.retention_ratio = s.get_optional<double>("cache.retention_ratio").value_or(0.2);
    c.mag_ratios = s.get_optional<std::vector<double>>("cache.mag_ratios").value_or(std::vector<double>{});
    c.calibrate = s.get_optional<bool>("cache.calibrate").value_or(false);
    c.min_steps = s.get_optional<int>("cache.min_steps").value_or(10);
    c.allow_few_steps = s.get_optional<bool>("cache.allow_few_steps").value_or(false);
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
    j["source"] = provenance;
    return j;
}

}  // namespace ddo
