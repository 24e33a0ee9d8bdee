#include "ddo/model/memory_forecast.hpp"

#include <algorithm>
#include <stdexcept>

#include <c10/core/ScalarType.h>

#include "ddo/util/format_bytes.hpp"

namespace ddo::model {

const char * to_string(MemorySide s) noexcept { return s == MemorySide::device ? "device" : "host"; }

StageMemory & StageMemory::tensor(std::string name, const std::vector<std::int64_t> & shape, at::ScalarType dtype,
                                  std::int64_t count, MemorySide side, std::string what) {
    std::uint64_t n = c10::elementSize(dtype);
    std::string dims;
    for (const auto d : shape) {
        if (d <= 0) throw std::logic_error("memory forecast: tensor '" + name + "' of phase '" + phase_ + "' has extent " + std::to_string(d));
        n *= std::uint64_t(d);
        dims += (dims.empty() ? "" : "x") + std::to_string(d);
    }
    if (count <= 0) return *this;
    const std::string shape_text = "[" + dims + "] " + c10::toString(dtype) + (count > 1 ? " x" + std::to_string(count) : "");
    terms_.push_back({std::move(name), side, n, std::uint64_t(count), what.empty() ? shape_text : shape_text + ": " + what});
    return *this;
}

StageMemory & StageMemory::bytes(std::string name, std::uint64_t bytes, MemorySide side, std::string what) {
    if (bytes > 0) terms_.push_back({std::move(name), side, bytes, 1, std::move(what)});
    return *this;
}

StageMemory & StageMemory::weights(std::string component) {
    components_.push_back(std::move(component));
    return *this;
}

std::uint64_t rounded_bytes(std::uint64_t bytes, bool cuda) noexcept {
    if (bytes == 0) return 0;
    if (cuda) return (bytes + 511) / 512 * 512;
    // glibc: a 16-byte chunk header; posix_memalign(64) blocks are usable to the next 16 bytes past the request.
    return (bytes + 8 + 15) / 16 * 16;
}

namespace {

// A term's bytes as its allocator hands them out: each allocation rounded, times the count.
std::uint64_t term_bytes(const MemoryTerm & t, bool cuda) {
    return rounded_bytes(t.bytes_each, cuda && t.side == MemorySide::device) * t.count;
}

}  // namespace

void MemoryForecast::set_weights(const std::string & component, Footprint planned, nlohmann::json detail) {
    weights_[component] = planned;
    weights_json_[component] = std::move(detail);
}

bool MemoryForecast::has_weights(const std::string & component) const { return weights_.count(component) != 0; }

std::vector<PhaseForecast> MemoryForecast::evaluate(const std::vector<StageMemory> & stages) const {
    std::vector<PhaseForecast> out;
    for (const auto & s : stages) {
        PhaseForecast p;
        p.phase = s.phase();
        for (const auto & c : s.components()) {
            const auto it = weights_.find(c);
            if (it == weights_.end())
                throw std::logic_error("memory forecast: phase '" + s.phase() + "' names the weights of '" + c +
                                       "', which were not planned (ModelRun::forecast_weights)");
            p.weights.device += it->second.device;
            p.weights.host += it->second.host;
        }
        p.peak = p.weights;
        for (const auto & t : s.terms()) (t.side == MemorySide::device ? p.peak.device : p.peak.host) += term_bytes(t, cuda_);
        p.terms = s.terms();
        p.part = s.part();
        if (!p.part.empty()) p.parts = {p.part};
        if (!out.empty() && out.back().phase == p.phase) {  // a part of the phase before: one after the other
            auto & q = out.back();
            const Footprint peak{std::max(q.peak.device, p.peak.device), std::max(q.peak.host, p.peak.host)};
            auto parts = std::move(q.parts);
            parts.push_back(p.part);
            if (p.peak.device + p.peak.host > q.peak.device + q.peak.host) q = std::move(p);
            q.peak = peak;
            q.parts = std::move(parts);
            continue;
        }
        out.push_back(std::move(p));
    }
    return out;
}

std::optional<MemoryForecast::Excess> MemoryForecast::first_excess(const std::vector<PhaseForecast> & phases,
                                                                   const MachineBudget & m) {
    for (const auto & p : phases) {
        if (m.device_is_host) {
            if (m.host.bytes && p.peak.device + p.peak.host > *m.host.bytes)
                return Excess{p.phase, "host", p.peak.device + p.peak.host, *m.host.bytes};
            continue;
        }
        if (m.device.bytes && p.peak.device > *m.device.bytes) return Excess{p.phase, "device", p.peak.device, *m.device.bytes};
        if (m.host.bytes && p.peak.host > *m.host.bytes) return Excess{p.phase, "host", p.peak.host, *m.host.bytes};
    }
    return std::nullopt;
}

nlohmann::json MemoryForecast::phases_json(const std::vector<PhaseForecast> & phases, const MachineBudget & m, bool cuda) {
    auto side = [](std::uint64_t forecast, const MemoryBudget & b) {
        nlohmann::json j = {{"forecast_bytes", forecast}, {"budget_bytes", b.bytes ? nlohmann::json(*b.bytes) : nlohmann::json(nullptr)},
                            {"budget_source", b.source}};
        if (b.bytes) j["margin_bytes"] = std::int64_t(*b.bytes) - std::int64_t(forecast);
        else j["margin_reason"] = "the budget is unknown: " + b.source;
        return j;
    };
    nlohmann::json out = nlohmann::json::array();
    for (const auto & p : phases) {
        nlohmann::json terms = nlohmann::json::array();
        for (const auto & t : p.terms)
            terms.push_back({{"name", t.name}, {"side", to_string(t.side)}, {"bytes", term_bytes(t, cuda)},
                             {"what", t.what}});
        nlohmann::json j = {{"phase", p.phase},
                            {"device", side(p.peak.device, m.device_is_host ? m.host : m.device)},
                            {"host", side(p.peak.host, m.host)},
                            {"weights", {{"device_bytes", p.weights.device}, {"host_bytes", p.weights.host}}},
                            {"terms", terms}};
        if (m.device_is_host) j["together"] = side(p.peak.device + p.peak.host, m.host);
        if (p.parts.size() > 1) j["parts"] = {{"names", p.parts}, {"largest", p.part}};  // its weights and terms
        out.push_back(std::move(j));
    }
    return out;
}

namespace {

bool fits(const MemoryForecast & f, const StageModel & model, const ForecastShape & s, const MachineBudget & m) {
    return !MemoryForecast::first_excess(f.evaluate(model(s)), m);
}

}  // namespace

FittingShape largest_fitting(const MemoryForecast & f, const StageModel & model, const ForecastShape & asked,
                             const MachineBudget & budget, std::int64_t multiple, std::int64_t frame_step, double margin) {
    FittingShape out;
    MachineBudget m = budget;
    for (auto * b : {&m.device, &m.host})
        if (b->bytes) b->bytes = std::uint64_t(double(*b->bytes) / (1.0 + margin));
    // Size: the long side in steps of `multiple`, the short one at the asked aspect (floored to `multiple`). Memory
    // grows with the size, so a binary search over the long side's steps.
    const std::int64_t longest = std::max(asked.width, asked.height);
    auto shape_at = [&](std::int64_t k) {
        const std::int64_t l = k * multiple;
        const std::int64_t s = std::max(multiple, std::min(asked.width, asked.height) * l / longest / multiple * multiple);
        return asked.width >= asked.height ? ForecastShape{l, s, asked.frames} : ForecastShape{s, l, asked.frames};
    };
    std::int64_t lo = 1, hi = longest / multiple;  // the largest k that fits lies in [lo, hi]
    if (hi >= 1 && fits(f, model, shape_at(1), m)) {
        while (lo < hi) {
            const std::int64_t mid = (lo + hi + 1) / 2;
            if (fits(f, model, shape_at(mid), m)) lo = mid;
            else hi = mid - 1;
        }
        if (lo < longest / multiple || !fits(f, model, asked, m)) out.size = shape_at(lo);
    }
    if (asked.frames > 1 && frame_step > 0) {
        std::int64_t flo = 0, fhi = (asked.frames - 1) / frame_step;
        auto frames_at = [&](std::int64_t k) { return ForecastShape{asked.width, asked.height, k * frame_step + 1}; };
        if (fits(f, model, frames_at(0), m)) {
            while (flo < fhi) {
                const std::int64_t mid = (flo + fhi + 1) / 2;
                if (fits(f, model, frames_at(mid), m)) flo = mid;
                else fhi = mid - 1;
            }
            out.frames = frames_at(flo);
        }
    }
    return out;
}

}  // namespace ddo::model
