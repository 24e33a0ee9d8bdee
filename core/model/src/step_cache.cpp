// Step caching: diffusers 0.42.1's FirstBlockCache and MagCache hooks (hooks/first_block_cache.py, mag_cache.py)
// as one state machine per guidance branch. Every arithmetic step is the hook's, in the hook's types: the
// first-block signal is a tensor reduction in the activations' dtype read out as a double; MagCache accumulates in
// float32 (its ratios are a float32 tensor). Note [Step caching] in docs/architecture.md.
#include "ddo/model/step_cache.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

using nlohmann::json;

std::uint64_t bytes_of(const at::Tensor & t) { return t.defined() ? std::uint64_t(t.nbytes()) : 0; }
std::uint64_t bytes_of(const Streams & s) {
    std::uint64_t b = 0;
    for (const auto & t : s) b += bytes_of(t);
    return b;
}

// A residual kept from another pass, on the rows `like` has. Same shape: itself. A residual of more rows (the
// qwen prefix KV cache computes the prefix rows only at step 0): its last rows, the rows the later passes compute.
// Fewer rows: undefined here; apply_rows adds it to the last rows, as MagCache's head hook does.
at::Tensor rows_like(const at::Tensor & residual, const at::Tensor & like) {
    if (residual.sizes() == like.sizes()) return residual;
    if (residual.dim() == 3 && like.dim() == 3 && residual.size(0) == like.size(0) && residual.size(2) == like.size(2) &&
        residual.size(1) > like.size(1))
        return residual.slice(1, residual.size(1) - like.size(1));
    return {};
}

// residual + x, the residual applied to x's rows (rows_like), or to x's last rows when it has fewer (MagCache).
at::Tensor apply_residual(const at::Tensor & residual, const at::Tensor & x, bool residual_first) {
    if (auto r = rows_like(residual, x); r.defined()) return residual_first ? r + x : x + r;
    if (residual.dim() == 3 && x.dim() == 3 && residual.size(0) == x.size(0) && residual.size(2) == x.size(2) &&
        residual.size(1) < x.size(1)) {
        auto out = x.clone();
        const int64_t d = x.size(1) - residual.size(1);
        out.slice(1, d) = out.slice(1, d) + residual;
        return out;
    }
    throw RuntimeError("step cache: a kept residual of shape " + std::string(c10::str(residual.sizes())) +
                       " cannot be applied to hidden states of shape " + c10::str(x.sizes()) +
                       "; this is a bug in the model plugin's block loop");
}

}  // namespace

std::vector<float> nearest_interp(const std::vector<double> & ratios, int length) {
    std::vector<float> src(ratios.begin(), ratios.end());  // torch.tensor(list): float32
    if (length <= 0 || src.empty()) return {};
    if (int(src.size()) == length) return src;
    if (length == 1) return {src.back()};
    // grid (float32) * scale (a Python float, applied in float32), rounded half to even.
    const float scale = float(double(src.size() - 1) / double(length - 1));
    std::vector<float> out(static_cast<std::size_t>(length));
    for (int i = 0; i < length; ++i) out[size_t(i)] = src[size_t(std::nearbyint(float(i) * scale))];
    return out;
}

struct StepCache::Branch {
    // first_block (FBCSharedBlockState)
    Streams head_output;
    at::Tensor head_residual;
    Streams tail_residuals;
    // mag (MagCacheState)
    at::Tensor previous_residual;
    float accumulated_ratio = 1.0f, accumulated_err = 0.0f;
    int accumulated_steps = 0, step_index = 0;
    std::vector<double> calibration, completed_calibration;
    std::uint64_t passes = 0, reused = 0;

    std::uint64_t bytes() const {
        return bytes_of(head_output) + bytes_of(head_residual) + bytes_of(tail_residuals) + bytes_of(previous_residual);
    }
};

StepCache::StepCache(StepCacheSettings settings, int steps) : s_(std::move(settings)), steps_(steps) {
    if (s_.kind == StepCacheKind::off) throw UsageError("step cache: cache.kind = off makes no cache");
    if (steps_ < s_.min_steps && !s_.allow_few_steps)
        throw UsageError("cache.kind = " + std::string(to_string(s_.kind)) + " on a " + std::to_string(steps_) +
                         "-step schedule: below cache.min_steps = " + std::to_string(s_.min_steps) +
                         ", where a step cache has little to reuse and can make the run slower (distilled few-step "
                         "schedules change too much between steps); use --cache off, or set cache.allow_few_steps = "
                         "true to run it anyway");
    if (s_.kind == StepCacheKind::mag && !s_.calibrate) ratios_ = nearest_interp(s_.mag_ratios, steps_);
}

std::vector<std::int64_t> StepCache::always_run() const {
    if (s_.kind == StepCacheKind::first_block) return {0};
    return {};
}

StepCache::Branch & StepCache::branch(const std::string & name) {
    for (auto & [n, b] : branches_)
        if (n == name) return *b;
    branches_.emplace_back(name, std::make_shared<Branch>());
    return *branches_.back().second;
}

void StepCache::reset() {
    for (auto & [n, b] : branches_) *b = Branch{};
}

Streams StepCache::run(const std::string & branch_name, int step, Streams x, std::int64_t blocks,
                       const ComputeFn & compute, const SkipFn & skip) {
    if (x.empty() || !x.front().defined()) throw RuntimeError("step cache: a pass without hidden states");
    Branch & b = branch(branch_name);
    json rec = {{"branch", branch_name}, {"step", step}};
    if (blocks < 2) {  // diffusers needs a head and a tail block; nothing to reuse with one
        for (std::int64_t i = 0; i < blocks; ++i) x = compute(i, x);
        rec["computed"] = true;
        rec["blocks_computed"] = blocks;
        rec["reason"] = "fewer than 2 blocks";
    } else if (s_.kind == StepCacheKind::first_block) {
        x = run_first_block(b, rec, std::move(x), blocks, compute, skip);
    } else {
        x = run_mag(b, rec, std::move(x), blocks, compute, skip);
    }
    ++passes_;
    ++b.passes;
    const bool computed = rec.value("computed", true);
    if (!computed) {
        ++reused_passes_;
        ++b.reused;
    }
    block_steps_ += std::uint64_t(blocks);
    computed_block_steps_ += rec.value("blocks_computed", std::uint64_t(0));
    bytes_not_streamed_ += rec.value("bytes_not_streamed", std::uint64_t(0));
    account_memory();
    rec["memory_bytes"] = memory_bytes_;
    pending_.push_back(std::move(rec));
    return x;
}

Streams StepCache::run_first_block(Branch & b, json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                                   const SkipFn & skip) {
    rec["threshold"] = s_.threshold;
    const at::Tensor head_in = x.front();
    Streams out = compute(0, x);
    const at::Tensor residual = out.front() - head_in;
    // FBCHeadBlockHook._should_compute_remaining_blocks: against the last *computed* pass's head residual.
    bool should_compute = true;
    if (b.head_residual.defined()) {
        const at::Tensor prev = rows_like(b.head_residual, residual);
        if (!prev.defined())
            throw RuntimeError("step cache: the first block's residual changed shape between passes; this is a bug in "
                               "the model plugin's block loop");
        const double diff = ((residual - prev).abs().mean() / prev.abs().mean()).item<double>();
        rec["signal"] = diff;
        should_compute = diff > s_.threshold;
    } else {
        rec["signal"] = nullptr;
        rec["signal_reason"] = "first pass of this branch: nothing to compare with";
    }
    std::uint64_t not_streamed = 0;
    if (!should_compute) {
        Streams result(out.size());
        for (size_t k = 0; k < out.size(); ++k)
            result[k] = k < b.tail_residuals.size() && b.tail_residuals[k].defined()
                            ? apply_residual(b.tail_residuals[k], out[k], /*residual_first=*/true)
                            : out[k];
        for (std::int64_t i = 1; i < blocks; ++i) not_streamed += skip(i);
        rec["computed"] = false;
        rec["blocks_computed"] = 1;
        rec["bytes_not_streamed"] = not_streamed;
        return result;
    }
    b.head_output = out;
    b.head_residual = residual;
    for (std::int64_t i = 1; i < blocks; ++i) out = compute(i, out);
    b.tail_residuals.assign(out.size(), at::Tensor());
    for (size_t k = 0; k < out.size(); ++k) b.tail_residuals[k] = out[k] - b.head_output[k];
    rec["computed"] = true;
    rec["blocks_computed"] = blocks;
    rec["bytes_not_streamed"] = 0;
    return out;
}

Streams StepCache::run_mag(Branch & b, json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                           const SkipFn & skip) {
    rec["threshold"] = s_.threshold;
    rec["mag_step"] = b.step_index;
    const at::Tensor head_in = x.front();
    bool should_compute = true;
    if (!s_.calibrate) {
        // MagCacheHeadHook.new_forward, in float32 as the hook's tensors are.
        const int current = b.step_index;
        const float scale = current >= int(ratios_.size()) ? 1.0f : ratios_[size_t(current)];
        const int retention_step = int(s_.retention_ratio * double(steps_) + 0.5);
        if (current >= retention_step) {
            b.accumulated_ratio = b.accumulated_ratio * scale;
            b.accumulated_steps += 1;
            b.accumulated_err = b.accumulated_err + std::fabs(1.0f - b.accumulated_ratio);
            rec["signal"] = b.accumulated_err;
            if (b.previous_residual.defined() && b.accumulated_err <= float(s_.threshold) &&
                b.accumulated_steps <= s_.max_skip_steps) {
                should_compute = false;
            } else {
                b.accumulated_ratio = 1.0f;
                b.accumulated_steps = 0;
                b.accumulated_err = 0.0f;
            }
        } else {
            rec["signal"] = nullptr;
            rec["signal_reason"] = "within the retained first " + std::to_string(retention_step) + " steps";
        }
    } else {
        rec["signal"] = nullptr;
        rec["signal_reason"] = "calibrating: every step computed";
    }
    auto advance = [&] {  // MagCacheBlockHook._advance_step
        if (++b.step_index >= steps_) {
            b.completed_calibration = b.calibration;
            b.step_index = 0;
            b.accumulated_ratio = 1.0f;
            b.accumulated_steps = 0;
            b.accumulated_err = 0.0f;
            b.previous_residual = at::Tensor();
            b.calibration.clear();
        }
    };
    if (!should_compute) {
        Streams result = x;
        result.front() = apply_residual(b.previous_residual, head_in, /*residual_first=*/false);
        std::uint64_t not_streamed = 0;
        for (std::int64_t i = 0; i < blocks; ++i) not_streamed += skip(i);
        advance();
        rec["computed"] = false;
        rec["blocks_computed"] = 0;
        rec["bytes_not_streamed"] = not_streamed;
        return result;
    }
    for (std::int64_t i = 0; i < blocks; ++i) x = compute(i, x);
    const at::Tensor & out = x.front();
    at::Tensor residual;
    if (out.sizes() == head_in.sizes()) residual = out - head_in;
    else if (out.dim() == 3 && head_in.dim() == 3 && out.size(2) == head_in.size(2) && out.size(1) > head_in.size(1))
        residual = out.slice(1, out.size(1) - head_in.size(1)) - head_in;  // the fused sequence's image rows
    else
        throw RuntimeError("step cache: the block stack returned " + std::string(c10::str(out.sizes())) + " for input " +
                           c10::str(head_in.sizes()) + "; this is a bug in the model plugin's block loop");
    if (s_.calibrate) {
        double ratio = 1.0;
        if (b.previous_residual.defined()) {
            const at::Tensor prev = rows_like(b.previous_residual, residual);
            if (!prev.defined())
                throw RuntimeError("step cache: the residual changed shape between passes while calibrating");
            const auto curr_norm = at::linalg_vector_norm(residual.to(at::kFloat), 2, {-1});
            const auto prev_norm = at::linalg_vector_norm(prev.to(at::kFloat), 2, {-1});
            ratio = (curr_norm / (prev_norm + 1e-8)).mean().item<double>();
        }
        b.calibration.push_back(ratio);
        rec["calibration_ratio"] = ratio;
    }
    b.previous_residual = residual;
    advance();
    rec["computed"] = true;
    rec["blocks_computed"] = blocks;
    rec["bytes_not_streamed"] = 0;
    return x;
}

void StepCache::account_memory() {
    std::uint64_t total = 0;
    for (const auto & [n, b] : branches_) total += b->bytes();
    memory_bytes_ = total;
    peak_memory_bytes_ = std::max(peak_memory_bytes_, total);
}

json StepCache::take_step_records() {
    json out = std::move(pending_);
    pending_ = json::array();
    return out;
}

std::vector<std::pair<std::string, std::vector<double>>> StepCache::calibration() const {
    std::vector<std::pair<std::string, std::vector<double>>> out;
    for (const auto & [n, b] : branches_)
        out.emplace_back(n, b->completed_calibration.empty() ? b->calibration : b->completed_calibration);
    return out;
}

json StepCache::summary() const {
    json j = s_.to_json();
    j["steps"] = steps_;
    if (s_.kind == StepCacheKind::mag && !s_.calibrate) j["mag_ratios_effective"] = ratios_;
    j["passes"] = passes_;
    j["reused_passes"] = reused_passes_;
    j["block_steps"] = block_steps_;
    j["computed_block_steps"] = computed_block_steps_;
    if (block_steps_ > 0) j["computed_block_fraction"] = double(computed_block_steps_) / double(block_steps_);
    else {
        j["computed_block_fraction"] = nullptr;
        j["computed_block_fraction_reason"] = "no pass ran";
    }
    j["bytes_not_streamed"] = bytes_not_streamed_;
    j["memory"] = {{"bytes", memory_bytes_},
                   {"peak_bytes", peak_memory_bytes_},
                   {"where", "the compute device, beside the activations (residuals of the hidden states)"}};
    json per = json::object();
    for (const auto & [n, b] : branches_) per[n] = {{"passes", b->passes}, {"reused", b->reused}};
    j["branches"] = per;
    const bool fired = reused_passes_ > 0;
    j["fired"] = fired;
    if (!fired && passes_ > 0)
        j["fired_reason"] = s_.calibrate ? "calibration computes every step"
                                         : "no pass was reused: the signal never fell below cache.threshold = " +
                                               std::to_string(s_.threshold) +
                                               "; the run paid the cache's checks and saved nothing (raise the "
                                               "threshold or use --cache off)";
    if (s_.kind == StepCacheKind::mag && s_.calibrate) {
        json cal = json::object();
        for (const auto & [n, r] : calibration()) cal[n] = r;
        j["calibration"] = cal;
    }
    return j;
}

}  // namespace ddo::model
