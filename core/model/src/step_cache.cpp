// Step caching: diffusers 0.42.1's FirstBlockCache, MagCache, TaylorSeer and SeaCache hooks (hooks/first_block_cache.py,
// mag_cache.py, taylorseer_cache.py, sea_cache.py's generic leader/tail path) as one state machine per guidance branch (TaylorSeer: per branch and module). Every arithmetic step is the hook's, in the hook's types: the
// first-block signal is a tensor reduction in the activations' dtype read out as a double; MagCache accumulates in
// float32 (its ratios are a float32 tensor). Note [Step caching] in docs/architecture.md.
#include "ddo/model/step_cache.hpp"

#include <ATen/ATen.h>
#include <ATen/ops/fft_fftfreq.h>
#include <ATen/ops/fft_fftn.h>
#include <ATen/ops/fft_ifftn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
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

namespace {

// TaylorSeerState: one hooked module's expansion in one branch (diffusers keeps one per module and cache_context).
struct TaylorState {
    bool inactive = false;
    int current_step = -1;
    std::optional<int> last_update_step;
    std::vector<std::vector<at::Tensor>> factors;  // per output: order 0..n, in the factors' dtype
    std::vector<at::ScalarType> dtypes;
    std::vector<std::vector<std::int64_t>> shapes;  // inactive: the outputs' shapes
    at::Device device = at::kCPU;

    std::uint64_t bytes() const {
        std::uint64_t n = 0;
        for (const auto & f : factors)
            for (const auto & t : f) n += bytes_of(t);
        return n;
    }
};

// Python's a % n for n > 0 (TaylorSeerCacheHook's interval test sees negative a before the warm-up ends).
int py_mod(int a, int n) { return ((a % n) + n) % n; }

// sea_cache.py _apply_sea_filter: `latent` is (T, H, W, C) (the caller's movedim(0, -1) of (C, T, H, W)); a Wiener
// gain per axis from the clean-signal power prior 1 / |f|^p and the noise level sigma, normalised to unit mean over the
// spatiotemporal grid, applied in the Fourier domain. Python's `1.0 / t` is `t.reciprocal() * 1.0` (Tensor.__rtruediv__),
// kept so here.
at::Tensor sea_filter(const at::Tensor & latent, double sigma, double power_exp) {
    const auto dtype = latent.scalar_type();
    const at::Tensor h = latent.contiguous().to(at::kFloat);
    const std::vector<int64_t> dims = {0, 1, 2};
    const at::Tensor spectrum = at::fft_fftn(h, std::nullopt, dims);
    sigma = std::max(1e-6, std::min(1.0 - 1e-6, sigma));
    const double signal_scale = 1.0 - sigma, noise_scale = sigma;
    at::Tensor gain;
    for (int64_t axis : dims) {
        const at::Tensor f = at::fft_fftfreq(h.size(axis), 1.0, at::TensorOptions().dtype(at::kFloat).device(h.device()));
        const at::Tensor clean = (f.abs().pow(power_exp) + 1e-16).reciprocal() * 1.0;
        const at::Tensor axis_gain =
            clean * signal_scale / (clean * std::pow(signal_scale, 2) + std::pow(noise_scale, 2) + 1e-16);
        std::vector<int64_t> shape(size_t(h.dim()), 1);
        shape[size_t(axis)] = axis_gain.size(0);
        gain = gain.defined() ? gain * axis_gain.reshape(shape) : axis_gain.reshape(shape);
    }
    const at::Tensor mean_gain = gain.mean();
    if (at::isfinite(mean_gain).item<bool>() && mean_gain.item<float>() > 0) gain = gain / mean_gain;
    return at::real(at::fft_ifftn(spectrum * gain, std::nullopt, dims)).to(dtype);
}

at::ScalarType factors_dtype(const std::string & name) {
    if (name == "fp32") return at::kFloat;
    if (name == "fp16") return at::kHalf;
    return at::kBFloat16;
}

}  // namespace

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
    // sea (SeaCacheContextState): the full passes' residuals (step, auxiliary streams' outputs, stream 0's residual),
    // the gate, and what observe() gave for the next pass.
    struct SeaEntry {
        int step;
        Streams aux;
        at::Tensor residual;
    };
    std::vector<SeaEntry> history;
    bool has_gate = false;
    int gate_step = 0;
    double gate_sigma = 0;
    bool gate_should_compute = true;
    Streams previous_indicator;
    double accumulated_distance = 0;
    int consecutive_cached = 0;
    bool observed = false;
    double sigma = 0;
    Streams raw_vision;
    // taylorseer: per hooked module; the index in pending_ of this branch's open pass record (-1: none)
    std::map<std::string, TaylorState> taylor;
    long open_record = -1;
    std::string name;
    std::uint64_t passes = 0, reused = 0;

    std::uint64_t bytes() const {
        std::uint64_t n =
            bytes_of(head_output) + bytes_of(head_residual) + bytes_of(tail_residuals) + bytes_of(previous_residual);
        for (const auto & [name, t] : taylor) n += t.bytes();
        for (const auto & e : history) n += bytes_of(e.aux) + bytes_of(e.residual);
        return n + bytes_of(previous_indicator);
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
    branches_.back().second->name = name;
    return *branches_.back().second;
}

void StepCache::reset() {
    for (auto & [n, b] : branches_) {
        *b = Branch{};
        b->name = n;
    }
}

Streams StepCache::run(const std::string & branch_name, int step, Streams x, std::int64_t blocks,
                       const ComputeFn & compute, const SkipFn & skip, const std::string & block_prefix) {
    if (x.empty() || !x.front().defined()) throw RuntimeError("step cache: a pass without hidden states");
    if (s_.kind == StepCacheKind::taylorseer && !bound_)
        throw RuntimeError("step cache: taylorseer without bind_modules(); this is a bug in the model plugin");
    Branch & b = branch(branch_name);
    // The record is open for the whole pass and until the next one of this branch: module() calls after the block
    // stack (proj_out) land in it too.
    pending_.push_back({{"branch", branch_name}, {"step", step}});
    const std::size_t at = pending_.size() - 1;
    b.open_record = long(at);
    json rec = pending_[at];
    if (s_.kind == StepCacheKind::taylorseer) {
        x = run_taylorseer(b, rec, std::move(x), blocks, compute, skip, block_prefix);
    } else if (s_.kind == StepCacheKind::sea) {
        x = run_sea(b, rec, step, std::move(x), blocks, compute, skip);
    } else if (blocks < 2) {  // diffusers needs a head and a tail block; nothing to reuse with one
        for (std::int64_t i = 0; i < blocks; ++i) x = compute(i, x);
        rec["computed"] = true;
        rec["blocks_computed"] = blocks;
        rec["reason"] = "fewer than 2 blocks";
    } else if (s_.kind == StepCacheKind::first_block) {
        x = run_first_block(b, rec, std::move(x), blocks, compute, skip);
    } else {
        x = run_mag(b, rec, std::move(x), blocks, compute, skip);
    }
    // module() calls inside the pass wrote into pending_[at]; keep them.
    if (pending_[at].contains("modules")) rec["modules"] = pending_[at]["modules"];
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
    pending_[at] = std::move(rec);
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

void StepCache::observe(const std::string & branch_name, double sigma, Streams raw_vision) {
    if (s_.kind != StepCacheKind::sea) return;
    Branch & b = branch(branch_name);
    b.observed = true;
    b.sigma = sigma;
    b.raw_vision = std::move(raw_vision);
}

// sea_cache.py: SeaCacheSharedState.resolve_gate at the leader block, then the leader's reuse (residual order 0 or 1,
// the auxiliary streams' last outputs) or the full stack and _record_full_execution at the tail.
Streams StepCache::run_sea(Branch & b, json & rec, int step, Streams x, std::int64_t blocks, const ComputeFn & compute,
                           const SkipFn & skip) {
    if (!b.observed)
        throw RuntimeError("step cache: sea without observe() before the pass; this is a bug in the model plugin");
    b.observed = false;
    rec["threshold"] = s_.threshold;
    const at::Tensor gen_input = x.front();
    Streams indicator;
    for (const auto & latent : b.raw_vision) indicator.push_back(sea_filter(latent.movedim(0, -1), b.sigma, s_.power_exp));
    b.raw_vision.clear();
    // resolve_gate
    bool should_compute = true;
    if (b.has_gate && b.gate_step == step && b.gate_sigma == b.sigma) {
        should_compute = b.gate_should_compute;
        rec["signal_reason"] = "the same step and sigma again: the gate's decision stands";
    } else {
        const bool non_adjacent = b.has_gate && step != b.gate_step + 1;
        if (non_adjacent) {  // reset_trajectory
            b.history.clear();
            b.previous_indicator.clear();
            b.accumulated_distance = 0;
            b.consecutive_cached = 0;
        }
        const bool retained = step < s_.retention_steps;
        const bool in_cache_end = step >= steps_ - s_.cache_end_steps;
        const bool first_observation = b.previous_indicator.empty();
        const bool max_consecutive = s_.max_consecutive_cached && b.consecutive_cached >= s_.max_consecutive_cached;
        bool invalid = non_adjacent || indicator.empty();
        const bool forced = invalid || retained || in_cache_end || first_observation || max_consecutive;
        double candidate = 0.0;
        if (forced) {
            rec["signal"] = nullptr;
            rec["signal_reason"] = retained ? "within the retained first steps"
                                   : in_cache_end ? "within the last cache_end_steps"
                                   : first_observation ? "first pass of this branch: nothing to compare with"
                                   : max_consecutive ? "max_consecutive_cached passes reused in a row"
                                                     : "no indicator";
        } else {
            double distance = 0.0;
            if (indicator.size() != b.previous_indicator.size()) {
                distance = std::numeric_limits<double>::infinity();
                invalid = true;
            } else {
                for (std::size_t k = 0; k < indicator.size(); ++k) {
                    const auto & cur = indicator[k];
                    const auto & prev = b.previous_indicator[k];
                    if (cur.sizes() != prev.sizes() || cur.scalar_type() != prev.scalar_type()) {
                        distance = std::numeric_limits<double>::infinity();
                        invalid = true;
                        break;
                    }
                    const at::Tensor num = (cur.to(at::kFloat) - prev.to(at::kFloat)).abs().mean();
                    const at::Tensor den = prev.to(at::kFloat).abs().mean() + 1e-16;
                    distance += (num / den).item<double>();
                }
                if (std::isfinite(distance)) distance /= double(indicator.size());
            }
            if (!std::isfinite(distance)) invalid = true;
            candidate = b.accumulated_distance + distance;
            should_compute = invalid || candidate >= s_.threshold;
            rec["signal"] = candidate;
            rec["distance"] = distance;
        }
        if (forced) should_compute = true;
        if (max_consecutive) should_compute = true;
        b.accumulated_distance = should_compute ? 0.0 : candidate;
        b.has_gate = true;
        b.gate_step = step;
        b.gate_sigma = b.sigma;
        b.gate_should_compute = should_compute;
        b.previous_indicator = indicator;
    }
    rec["sigma"] = b.sigma;
    // The leader: a reuse needs a residual, of the hidden states' shape.
    const std::size_t aux = x.size() - 1;
    if (!should_compute && b.history.empty()) {
        b.accumulated_distance = 0.0;
        should_compute = true;
        rec["reuse_refused"] = "no full pass recorded yet";
    }
    if (!should_compute) {
        const std::size_t keep = std::size_t(s_.residual_order + 1);
        const std::size_t from = b.history.size() > keep ? b.history.size() - keep : 0;
        const auto & latest = b.history.back();
        bool mismatch = latest.aux.size() != aux;
        for (std::size_t k = from; k < b.history.size() && !mismatch; ++k)
            mismatch = b.history[k].residual.sizes() != gen_input.sizes() ||
                       b.history[k].residual.scalar_type() != gen_input.scalar_type();
        for (std::size_t k = 0; k < aux && !mismatch; ++k)
            mismatch = latest.aux[k].sizes() != x[k + 1].sizes() || latest.aux[k].scalar_type() != x[k + 1].scalar_type();
        if (mismatch) {
            b.history.clear();
            b.accumulated_distance = 0.0;
            should_compute = true;
            rec["reuse_refused"] = "the kept residual's shape differs from the hidden states'";
        }
    }
    if (!should_compute) {
        const std::size_t keep = std::size_t(s_.residual_order + 1);
        const std::size_t n = std::min(keep, b.history.size());
        const auto & latest = b.history.back();
        at::Tensor residual = latest.residual;
        if (s_.residual_order == 1 && n >= 2) {
            const auto & previous = b.history[b.history.size() - 2];
            if (latest.step != previous.step) {
                const double scale = double(step - latest.step) / double(latest.step - previous.step);
                residual = latest.residual + (latest.residual - previous.residual) * scale;
            }
        }
        b.consecutive_cached += 1;
        Streams out(x.size());
        out[0] = gen_input + residual;
        for (std::size_t k = 0; k < aux; ++k) out[k + 1] = latest.aux[k];
        std::uint64_t not_streamed = 0;
        for (std::int64_t i = 0; i < blocks; ++i) not_streamed += skip(i);
        rec["computed"] = false;
        rec["blocks_computed"] = 0;
        rec["bytes_not_streamed"] = not_streamed;
        return out;
    }
    for (std::int64_t i = 0; i < blocks; ++i) x = compute(i, x);
    // _record_full_execution
    b.consecutive_cached = 0;
    if (x.front().sizes() == gen_input.sizes()) {
        Branch::SeaEntry e{step, {}, (x.front() - gen_input).clone()};
        for (std::size_t k = 0; k < aux; ++k) e.aux.push_back(x[k + 1].clone());
        b.history.push_back(std::move(e));
        const std::size_t keep = std::size_t(s_.residual_order + 1);
        if (b.history.size() > keep) b.history.erase(b.history.begin(), b.history.end() - long(keep));
    }
    rec["computed"] = true;
    rec["blocks_computed"] = blocks;
    rec["bytes_not_streamed"] = 0;
    return x;
}

Streams StepCache::run_taylorseer(Branch & b, json & rec, Streams x, std::int64_t blocks, const ComputeFn & compute,
                                  const SkipFn & skip, const std::string & block_prefix) {
    rec["signal"] = nullptr;
    rec["signal_reason"] = "taylorseer: a fixed schedule (disable_cache_before_step, cache_interval), per module";
    std::int64_t computed = 0;
    std::uint64_t not_streamed = 0;
    for (std::int64_t i = 0; i < blocks; ++i) {
        const std::string name = block_prefix + "." + std::to_string(i);
        if (!hooked(name)) {
            x = compute(i, x);
            ++computed;
            continue;
        }
        auto call = module(b.name, name, [&] { return compute(i, x); });
        if (call.computed) ++computed;
        else not_streamed += skip(i);
        x = std::move(call.outputs);
    }
    bool any_predicted = false;
    if (const auto & open = pending_[std::size_t(b.open_record)]; open.contains("modules"))
        for (const auto & [m, v] : open["modules"].items()) any_predicted = any_predicted || v == "P";
    rec["computed"] = !any_predicted;
    rec["blocks_computed"] = computed;
    rec["bytes_not_streamed"] = not_streamed;
    return x;
}

void StepCache::bind_modules(const std::vector<std::string> & hookable, const std::vector<std::string> & modules) {
    if (s_.kind != StepCacheKind::taylorseer) return;
    // diffusers' taylorseer_cache.py: _TRANSFORMER_BLOCK_IDENTIFIERS (the default), and lite mode's two sets.
    static const std::vector<std::string> kAttention = {"^blocks.*attn", "^transformer_blocks.*attn",
                                                        "^single_transformer_blocks.*attn",
                                                        "^temporal_transformer_blocks.*attn"};
    std::vector<std::string> active = s_.cache_identifiers, inactive = s_.skip_predict_identifiers;
    std::string active_key = "cache.cache_identifiers", inactive_key = "cache.skip_predict_identifiers";
    bool user_active = !active.empty();
    if (s_.use_lite_mode) {
        active = {"^proj_out$"};
        inactive = {"^[^.]*block[^.]*\\.[^.]+$"};
        active_key = inactive_key = "cache.use_lite_mode";
        user_active = false;
    } else if (active.empty()) {
        active = kAttention;
        active_key = "cache.kind = taylorseer (diffusers' default set, ^transformer_blocks.*attn and its siblings)";
    }
    std::set<std::string> can(hookable.begin(), hookable.end());
    std::set<std::string> all(modules.begin(), modules.end());
    all.insert(hookable.begin(), hookable.end());
    auto compile = [](const std::vector<std::string> & ps) {
        std::vector<std::regex> out;
        for (const auto & p : ps) out.emplace_back(p, std::regex::ECMAScript);
        return out;
    };
    const auto act = compile(active), inact = compile(inactive);
    std::string hookable_list;
    for (const auto & h : hookable) {
        if (hookable_list.size() > 400) {
            hookable_list += ", ...";
            break;
        }
        hookable_list += (hookable_list.empty() ? "" : ", ") + h;
    }
    auto matches = [](const std::vector<std::regex> & res, const std::string & n, std::size_t * which = nullptr) {
        for (std::size_t k = 0; k < res.size(); ++k)
            if (std::regex_match(n, res[k])) {
                if (which) *which = k;
                return true;
            }
        return false;
    };
    hooks_.clear();
    for (const auto & n : all) {
        std::size_t k = 0;
        const bool is_inactive = matches(inact, n, &k);
        const bool is_active = !is_inactive && matches(act, n, &k);
        if (!is_inactive && !is_active) continue;
        if (!can.count(n)) {
            const auto & key = is_inactive ? inactive_key : active_key;
            const auto & pat = is_inactive ? inactive[k] : active[k];
            throw UsageError(key + ": the pattern \"" + pat + "\" matches module '" + (n.empty() ? "(the model)" : n) +
                             "', which this plugin cannot route through the cache; the modules it can: " +
                             hookable_list + " (give patterns that match only those)");
        }
        hooks_[n] = Hook{is_inactive};
    }
    // A pattern given by the user that hooks nothing is a mistake, not a no-op.
    for (const auto & [key, ps, res] : {std::tuple{"cache.cache_identifiers", s_.cache_identifiers, compile(s_.cache_identifiers)},
                                        std::tuple{"cache.skip_predict_identifiers", s_.skip_predict_identifiers,
                                                   compile(s_.skip_predict_identifiers)}})
        for (std::size_t k = 0; k < ps.size(); ++k) {
            bool any = false;
            for (const auto & n : all) any = any || std::regex_match(n, res[k]);
            if (!any)
                throw UsageError(std::string(key) + ": the pattern \"" + ps[k] + "\" matches no module of this "
                                 "model; the modules this plugin can route through the cache: " + hookable_list);
        }
    (void)user_active;
    if (hooks_.empty())
        throw UsageError(active_key + " hooks no module of this model, so taylorseer would change nothing; set "
                         "cache.cache_identifiers to some of: " + hookable_list + " (or cache.use_lite_mode = true)");
    bound_ = true;
}

bool StepCache::hooked(const std::string & module) const {
    return s_.kind == StepCacheKind::taylorseer && hooks_.count(module) > 0;
}

ModuleCall StepCache::module(const std::string & branch_name, const std::string & name,
                             const std::function<Outputs()> & compute) {
    if (!hooked(name)) return {compute(), true};
    Branch & b = branch(branch_name);
    auto [it, fresh] = b.taylor.try_emplace(name);
    TaylorState & st = it->second;
    if (fresh) st.inactive = hooks_.at(name).inactive;
    if (std::find(hook_order_.begin(), hook_order_.end(), name) == hook_order_.end()) hook_order_.push_back(name);
    // TaylorSeerCacheHook._measure_should_compute
    st.current_step += 1;
    const int cs = st.current_step;
    const bool warmup = cs < s_.disable_cache_before_step;
    const bool interval = py_mod(cs - s_.disable_cache_before_step - 1, s_.cache_interval) == 0;
    const bool cooldown = s_.disable_cache_after_step && cs >= *s_.disable_cache_after_step;
    const bool should_compute = warmup || interval || cooldown;
    ++module_calls_;
    ModuleCall call;
    call.computed = should_compute;
    if (should_compute) {
        call.outputs = compute();
        if (call.outputs.empty() || !call.outputs.front().defined())
            throw RuntimeError("step cache: module '" + name + "' returned no tensor; this is a bug in the model plugin");
        // TaylorSeerState.update
        st.dtypes.clear();
        for (const auto & o : call.outputs) st.dtypes.push_back(o.scalar_type());
        st.device = call.outputs.front().device();
        if (st.inactive) {
            st.shapes.clear();
            for (const auto & o : call.outputs) st.shapes.push_back(o.sizes().vec());
        } else {
            const auto fdt = factors_dtype(s_.taylor_factors_dtype);
            std::vector<std::vector<at::Tensor>> next(call.outputs.size());
            for (std::size_t i = 0; i < call.outputs.size(); ++i) {
                const at::Tensor & features = call.outputs[i];
                std::vector<at::Tensor> f = {features};
                if (st.last_update_step) {
                    const int delta = cs - *st.last_update_step;
                    const std::vector<at::Tensor> none;
                    const auto & prev = i < st.factors.size() ? st.factors[i] : none;
                    for (int j = 0; j < s_.max_order; ++j) {
                        // A changed shape (the qwen prefix KV cache: prefix + target rows at step 0, target rows
                        // after) restarts the expansion from order 0, as the hook does.
                        if (std::size_t(j) >= prev.size() || prev[size_t(j)].sizes() != f[size_t(j)].sizes()) break;
                        f.push_back((f[size_t(j)] - prev[size_t(j)].to(features.scalar_type())) / std::int64_t(delta));
                    }
                }
                for (auto & t : f) t = t.to(fdt);
                next[i] = std::move(f);
            }
            st.factors = std::move(next);
        }
        st.last_update_step = cs;
    } else {
        ++module_predicted_;
        // TaylorSeerState.predict
        if (!st.last_update_step)
            throw RuntimeError("step cache: module '" + name + "' predicted before any update; this is a bug");
        const int offset = cs - *st.last_update_step;
        if (st.inactive) {
            for (std::size_t i = 0; i < st.dtypes.size(); ++i)
                call.outputs.push_back(at::zeros(st.shapes[i], at::TensorOptions().dtype(st.dtypes[i]).device(st.device)));
        } else {
            const std::size_t orders = st.factors.front().size();
            for (std::size_t i = 0; i < st.factors.size(); ++i) {
                const auto dt = st.dtypes[i];
                if (st.factors[i].size() < orders)
                    throw RuntimeError("step cache: module '" + name + "' has fewer Taylor factors for output " +
                                       std::to_string(i) + " than for output 0");
                at::Tensor out = at::zeros_like(st.factors[i][0], st.factors[i][0].options().dtype(dt));
                double factorial = 1;
                for (std::size_t order = 0; order < orders; ++order) {
                    if (order > 0) factorial *= double(order);
                    // Python: (step_offset ** order) / math.factorial(order), an int power then a true division.
                    double power = 1;
                    for (std::size_t k = 0; k < order; ++k) power *= double(offset);
                    out = out + st.factors[i][order].to(dt) * (power / factorial);
                }
                call.outputs.push_back(std::move(out));
            }
        }
    }
    if (b.open_record >= 0 && std::size_t(b.open_record) < pending_.size()) {
        auto & rec = pending_[std::size_t(b.open_record)];
        rec["modules"][name] = should_compute ? "C" : "P";
        // A module after the block stack (proj_out) that predicts makes a closed pass a reused one.
        if (!should_compute && rec.contains("memory_bytes") && rec.value("computed", true)) {
            rec["computed"] = false;
            ++reused_passes_;
            ++b.reused;
        }
    }
    account_memory();
    return call;
}

std::uint64_t StepCache::kept_bytes(const std::vector<std::vector<std::int64_t>> & streams, at::ScalarType dtype) const {
    if (streams.empty()) return 0;
    auto bytes = [](const std::vector<std::int64_t> & shape, at::ScalarType t) {
        return std::uint64_t(c10::multiply_integers(shape)) * at::elementSize(t);
    };
    std::uint64_t all = 0;
    for (const auto & shape : streams) all += bytes(shape, dtype);
    const std::uint64_t first = bytes(streams.front(), dtype);
    switch (s_.kind) {
    case StepCacheKind::off: return 0;
    case StepCacheKind::first_block: return 2 * all + first;  // head_output + tail_residuals, head_residual
    case StepCacheKind::mag: return first;                    // previous_residual
    case StepCacheKind::sea: return std::uint64_t(s_.residual_order + 1) * all;  // history: aux streams + residual
    case StepCacheKind::taylorseer: {
        const auto t = s_.taylor_factors_dtype == "fp32" ? at::kFloat : s_.taylor_factors_dtype == "fp16" ? at::kHalf : at::kBFloat16;
        return std::uint64_t(hooks_.size()) * std::uint64_t(s_.max_order + 1) * bytes(streams.front(), t);
    }
    }
    return 0;
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
    for (auto & [n, b] : branches_) b->open_record = -1;
    // taylorseer: each pass's modules as one string over hook_order_ (summary.hooked_modules): C computed,
    // P predicted, - not called in the pass (inside a predicted block, say).
    for (auto & rec : out) {
        if (!rec.contains("modules")) continue;
        std::string pattern;
        for (const auto & m : hook_order_) pattern += rec["modules"].contains(m) ? rec["modules"][m].get<std::string>() : "-";
        rec["modules"] = pattern;
    }
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
                   {"where", s_.kind == StepCacheKind::taylorseer
                                 ? "the compute device, beside the activations (each hooked module's Taylor factors, "
                                   "per branch, in cache.taylor_factors_dtype)"
                                 : "the compute device, beside the activations (residuals of the hidden states)"}};
    if (s_.kind == StepCacheKind::taylorseer) {
        j["hooked_modules"] = hook_order_;
        j["hooked"] = hooks_.size();
        json inactive = json::array();
        for (const auto & [n, h] : hooks_)
            if (h.inactive) inactive.push_back(n);
        j["skip_predict_modules"] = inactive;
        j["module_calls"] = module_calls_;
        j["module_calls_predicted"] = module_predicted_;
        if (module_calls_ > 0) j["predicted_fraction"] = double(module_predicted_) / double(module_calls_);
        else {
            j["predicted_fraction"] = nullptr;
            j["predicted_fraction_reason"] = "no hooked module was called";
        }
    }
    json per = json::object();
    for (const auto & [n, b] : branches_) per[n] = {{"passes", b->passes}, {"reused", b->reused}};
    j["branches"] = per;
    const bool fired = reused_passes_ > 0;
    j["fired"] = fired;
    if (!fired && passes_ > 0)
        j["fired_reason"] = s_.kind == StepCacheKind::taylorseer
                                ? "no module was predicted: with disable_cache_before_step = " +
                                      std::to_string(s_.disable_cache_before_step) + " and cache_interval = " +
                                      std::to_string(s_.cache_interval) + " no step of " + std::to_string(steps_) +
                                      " is a predicted one"
                            : s_.calibrate ? "calibration computes every step"
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
