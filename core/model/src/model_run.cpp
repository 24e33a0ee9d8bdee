#include "ddo/model/model_run.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>


#include "ddo/error.hpp"
#include "ddo/model/image_output.hpp"
#include "ddo/model/model_session.hpp"
#include "ddo/model/tensor_output.hpp"
#include "ddo/platform/host_heap.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/run_session.hpp"
#include "ddo/store/checkpoint_identity.hpp"
#include "ddo/store/weight_encoding.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/allocation_meter.hpp"
#include "ddo/torch/torch_memory.hpp"
#include "ddo/util/format_bytes.hpp"
#include "ddo/util/atomic_write.hpp"
#include "ddo/util/build_info.hpp"
#include "ddo/util/file_digest.hpp"

namespace ddo::model {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ModelRun::PhaseState {
    std::optional<RunTracker::Phase> phase;
    Clock::time_point begun = Clock::now();
    Clock::time_point last_step = begun;
    // Per open component at the previous step: bytes streamed and stall so far (the step's figures are deltas).
    std::map<std::string, std::pair<std::uint64_t, double>> engine_at_last_step;
    // Note [Memory forecast]: the most the open weights held outside LibTorch in this phase (engine counters).
    Footprint engine_max;
    std::optional<std::uint64_t> torch_at_begin;  // LibTorch's allocated bytes when the phase began (what it inherits)
    bool embeddings_kept = false;  // the server's embeddings cache held this encode's output: the encoder did not run
    void sample(const std::vector<ComponentWeights *> & open) {
        Footprint now;
        for (const auto * w : open) {
            const auto f = w->footprint();
            now.device += f.device;
            now.host += f.host;
        }
        engine_max.device = std::max(engine_max.device, now.device);
        engine_max.host = std::max(engine_max.host, now.host);
    }
};

ModelRun::ModelRun(RunContext & ctx, std::string plugin_name, LogFn log)
    : ctx_(ctx), plugin_(std::move(plugin_name)), log_(std::move(log)) {
    if (!ctx_.settings) throw UsageError(plugin_ + ": run without resolved settings (the host passes them)");
    if (ctx_.session) session_ = &ModelSession::of(*ctx_.session);
}

ModelRun::~ModelRun() {
    for (auto * w : open_) w->set_on_destroy({});  // the plugin outlived the run: nothing to report into
    try {
        end_phase();
    } catch (...) {
    }
}

const fs::path & ModelRun::require_model_dir() const {
    if (ctx_.model_dir.empty())
        throw UsageError(plugin_ + " reads a checkpoint: --model DIR is required (a diffusers-layout directory)");
    if (!fs::is_directory(ctx_.model_dir))
        throw UsageError("--model " + ctx_.model_dir.string() + ": no such directory; point it at a diffusers-layout checkpoint");
    return ctx_.model_dir;
}

void ModelRun::check_class(const fs::path & relative, const std::vector<std::string> & expected) const {
    const fs::path file = require_model_dir() / relative;
    std::ifstream in(file);
    if (!in) return;
    const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("_class_name") || !j["_class_name"].is_string()) return;
    const std::string found = j["_class_name"].get<std::string>();
    if (std::find(expected.begin(), expected.end(), found) != expected.end()) return;
    std::string list;
    for (const auto & e : expected) list += (list.empty() ? "" : ", ") + e;
    throw UsageError(file.string() + ": _class_name is '" + found + "', but plugin '" + plugin_ + "' takes " + list +
                     "; this is not its checkpoint: choose the plugin for " + found + " (ddo-host plugins) or another --model");
}

void ModelRun::log(int level, const std::string & message) const {
    if (log_) log_(level, message);
}

const nlohmann::json * ModelRun::option_value(const std::string & key, std::string * source) const {
    const std::string full = "plugin." + plugin_ + "." + key;
    if (!settings().has(full)) return nullptr;
    const auto & rv = settings().at(full);
    if (rv.value.is_null()) return nullptr;
    if (source) *source = rv.provenance.to_string();
    return &rv.value;
}

void ModelRun::throw_option_type(const std::string & key, const std::string & source, const char * what) const {
    throw UsageError("plugin." + plugin_ + "." + key + " (" + source + "): wrong type: " + what);
}

Workload ModelRun::workload(const WorkloadDefaults & d) {
    if (!latents_files_accepted_)
        for (const auto & [file, flag] : {std::pair{&ctx_.save_latents, "--save-latents"}, {&ctx_.decode_latents, "--decode-latents"}})
            if (!file->empty())
                throw UsageError(std::string(flag) + " " + file->string() + ": plugin " + plugin_ +
                                 " does not write or decode latents files (ltx2_video does); drop the flag");
    if (!step_cache_accepted_)
        if (const auto kind = settings().get_optional<std::string>("cache.kind"); kind && *kind != "off")
            throw UsageError("cache.kind = \"" + *kind + "\" (" + settings().at("cache.kind").provenance.to_string() +
                             "): plugin '" + plugin_ + "' does not run its denoising loop through the step cache (Note "
                             "[Step caching]); use --cache off");
    const auto & s = settings();
    auto pick = [&](const char * key, auto fallback) {
        using T = decltype(fallback);
        return s.get_optional<T>(std::string("workload.") + key).value_or(fallback);
    };
    Workload w;
    w.steps = pick("steps", d.steps);
    w.steps_set = s.get_optional<int>("workload.steps").has_value();
    w.sigmas = s.get_optional<std::vector<double>>("workload.sigmas");
    w.width = pick("width", d.width);
    w.height = pick("height", d.height);
    w.width_set = s.get_optional<std::int64_t>("workload.width").has_value();
    w.height_set = s.get_optional<std::int64_t>("workload.height").has_value();
    w.frames = pick("frames", d.frames);
    w.fps = pick("fps", d.fps);
    w.seed = pick("seed", d.seed);
    w.num_images = pick("num_images", 1);
    w.guidance_scale = s.get_optional<double>("workload.guidance_scale");
    w.prompt = s.get_optional<std::string>("workload.prompt");
    w.negative_prompt = s.get_optional<std::string>("workload.negative_prompt");
    if (s.has("workload.images") && !s.at("workload.images").value.is_null())
        for (const auto & e : s.at("workload.images").value) w.images.push_back(e.get<std::string>());
    w.strength = s.get_optional<double>("workload.strength");
    if (w.strength && !(*w.strength > 0.0 && *w.strength <= 1.0))  // the schema checks [0, 1]; 0 re-noises nothing
        throw UsageError("workload.strength = " + std::to_string(*w.strength) + " (" +
                         s.at("workload.strength").provenance.to_string() +
                         "): out of range (0, 1]: give a strength above 0 (1 = the image fully re-noised)");
    // workload.precision (bf16 | fp16 | fp32); unset = bf16 on CUDA, fp32 on the CPU.
    const bool cuda = device().cuda;
    w.precision = s.get_optional<std::string>("workload.precision").value_or(cuda ? "bf16" : "fp32");
    if (w.precision == "fp32") w.dtype = at::kFloat;
    else if (w.precision == "bf16") w.dtype = at::kBFloat16;
    else if (w.precision == "fp16") w.dtype = at::kHalf;
    else throw UsageError("workload.precision must be bf16, fp16 or fp32 (got '" + w.precision + "')");
    return w;
}

bool ModelRun::prompt_from_text(const Workload & w) const {
    const bool from_text = w.prompt.has_value();
    if (encode_only() && !from_text)
        throw UsageError("ddo-host encode: give the prompt with -p/--prompt (and -n/--negative-prompt for guidance)");
    if (from_text && !prompt_embeds().empty())
        throw UsageError(plugin_ + ": both workload.prompt (-p) and --prompt-embeds were given; the embeddings would "
                         "replace the prompt. Pass one of them");
    if (!from_text && w.negative_prompt)
        throw UsageError(plugin_ + ": workload.negative_prompt (-n) without workload.prompt (-p): with "
                         "--prompt-embeds put negative_prompt_embeds in that file, or give -p too");
    return from_text;
}

void ModelRun::refuse_if_set(const std::string & key, const std::string & why) const {
    if (!settings().has(key)) return;
    const auto & rv = settings().at(key);
    if (rv.provenance.layer == SettingLayer::builtin_default) return;
    throw UsageError(key + " = " + rv.value.dump() + " (" + rv.provenance.to_string() + "): plugin '" + plugin_ +
                     "' cannot honour it: " + why + "; remove the key");
}

const DevicePlacement & ModelRun::device() {
    if (!device_) {
        device_ = place_device(settings());
        ddo::torch::attach_torch_memory(ctx_.tracker, device_->device());  // torch_allocated / torch_reserved
        ddo::torch::AllocationMeter::install();  // the forecast's measured side (Note [Memory forecast])
    }
    return *device_;
}

ComponentPlan ModelRun::plan(const std::string & component) {
    auto p = make_plan(settings(), component, device(), ctx_.allocator_vtable, ctx_.allocator_name,
                       ctx_.allocator_error);
    p.machine_device_bytes = ctx_.machine.device_bytes;
    p.machine_device_source = ctx_.machine.device_source;
    return p;
}

store::ComponentSource ModelRun::component(const std::string & name) const {
    const auto it = ctx_.component_files.find(name);
    return it == ctx_.component_files.end() ? store::ComponentSource(ctx_.model_dir / name)
                                            : store::ComponentSource(ctx_.model_dir / name, it->second);
}

namespace {

// The weight files a source reads, with their size and modification time: a file replaced in place between two runs
// of a server changes the key even when its header (checkpoint identity) stays the same.
nlohmann::json source_files(const store::ComponentSource & source) {
    nlohmann::json files = nlohmann::json::array();
    auto add = [&](const fs::path & f) {
        std::error_code ec;
        const auto size = fs::file_size(f, ec);
        const auto mtime = fs::last_write_time(f, ec);
        files.push_back({f.string(), ec ? 0 : size, ec ? 0 : mtime.time_since_epoch().count()});
    };
    if (source.replaced()) add(source.file);
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(source.dir, ec)) {
        const auto ext = e.path().extension();
        if (ext == ".safetensors" || ext == ".gguf" || ext == ".json") add(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string digest_of(const nlohmann::json & key) {
    const std::string text = key.dump();
    return xxh3_128_hex(text.data(), text.size());
}

}  // namespace

std::string ModelRun::weights_key(const ComponentPlan & plan, const store::ComponentSource & source,
                                  const std::vector<GroupSpec> & groups, at::ScalarType dtype) const {
    const auto & k = plan.capacities;
    nlohmann::json g = nlohmann::json::array();
    for (const auto & spec : groups) g.push_back({spec.name, spec.tensors});
    const nlohmann::json key = {
        {"plugin", plugin_},
        {"component", plan.component},
        {"files", source_files(source)},
        {"renames", source.renames},
        {"dropped", source.dropped},
        {"identity", component_identity(plan.component)},
        {"groups", digest_of(g)},
        {"route", to_string(plan.route)},
        {"capacities", {k.device_budget_gb, k.resident_budget_gb, k.pinned_host_budget_gb, k.pin_host_memory,
                        k.ram_headroom_gb, k.staging_slots, k.prefetch_depth, int(k.host_registration),
                        k.host_registration_ceiling_gb, k.allocator, int(k.allocator_backend), int(k.selection)}},
        {"use_stream", plan.use_stream},
        {"blocks_per_group", plan.blocks_per_group},
        {"resident_first", plan.resident_first},
        {"device", plan.placement.device().str()},
        {"allocator", plan.allocator_name},
        {"allocator_options", plan.allocator_options},
        {"dtype", std::string(c10::toString(dtype))},
        {"loras", checkpoint_.value("loras", nlohmann::json(nullptr))},
        {"lora_apply", settings().get_optional<std::string>("lora.apply").value_or("runtime")}};
    return digest_of(key);
}

std::unique_ptr<ComponentWeights> ModelRun::open_weights(const ComponentPlan & plan, const store::ComponentSource & source,
                                                         std::vector<GroupSpec> groups, at::ScalarType compute_dtype) {
    std::unique_ptr<ComponentWeights> w;
    std::string key, why;
    const bool in_session = session_ && !ctx_.dry_run;
    if (in_session) {
        key = weights_key(plan, source, groups, compute_dtype);
        if (session_->keeps(plan.component)) w = session_->take(plan.component, key, why);
        else why = "the server does not keep " + plan.component + " between runs (--keep-weights)";
    }
    const bool reused = w != nullptr;
    if (reused) w->resume();
    else w = ComponentWeights::open(source, std::move(groups), plan, compute_dtype, lora(plan.component, compute_dtype));
    if (in_session) {
        if (session_->keeps(plan.component)) session_->count_run(plan.component, reused);
        session_keys_[w.get()] = key;
        auto & note = session_notes_[plan.component];
        note = {{"weights", reused ? "reused" : "built"},
                {"reason", reused ? nlohmann::json("loaded by an earlier run of this server under the same key: nothing read, "
                                                   "uploaded or converted again for what it holds")
                                  : nlohmann::json(why)},
                {"key", key.substr(0, 16)},
                {"runs_of_entry", session_->keeps(plan.component) ? session_->runs(plan.component) : 1}};
        if (reused) note["held_at_open"] = w->held();
    }
    if (auto * tr = ctx_.tracker) {
        tr->set_route_intended(plan.component, to_string(plan.route), plan.route_source);
        tr->set_route_executed(plan.component, w->route());
        auto j = w->report();  // the plan; replaced by the counters at unload
        if (in_session) j["session"] = session_notes_[plan.component];
        tr->set_counters(plan.component, std::move(j));
    }
    open_.push_back(w.get());
    w->set_on_destroy([this](const ComponentWeights & cw) {
        open_.erase(std::remove(open_.begin(), open_.end(), &cw), open_.end());
        session_keys_.erase(&cw);
        if (auto * tr = ctx_.tracker) {
            auto j = cw.report();
            j["unloaded"] = false;
            j["unloaded_reason"] = "the run ended in phase '" + phase_name_ + "' before the component was unloaded";
            if (const auto n = session_notes_.find(cw.component()); n != session_notes_.end())
                j["session"] = n->second;
            tr->set_counters(cw.component(), std::move(j));
        }
    });
    return w;
}

void ModelRun::unload(std::unique_ptr<ComponentWeights> w) {
    if (!w) return;
    w->set_on_destroy({});
    open_.erase(std::remove(open_.begin(), open_.end(), w.get()), open_.end());
    if (phase_) {  // what the weights held, this one included, before it is freed
        auto held = open_;
        held.push_back(w.get());
        phase_->sample(held);
    }
    const auto k = session_keys_.find(w.get());
    const std::string key = k == session_keys_.end() ? std::string() : k->second;
    if (k != session_keys_.end()) session_keys_.erase(k);
    const std::string component = w->component();
    const bool keep = !key.empty() && session_->keeps(component);
    const std::uint64_t outstanding = keep ? w->park() : w->finish();
    auto j = w->report();
    j["unloaded"] = !keep;
    j[keep ? "kept_in_phase" : "unloaded_in_phase"] = phase_name_;
    j["outstanding_owners_at_unload"] = outstanding;
    if (!key.empty()) {
        auto & note = session_notes_[component];
        // What this run read from the weight files through the engine: resident uploads, streamed file reads, host
        // copies filled (mapped residents are read in place, from the page cache, and counted in mapped_bytes).
        const auto & kc = j["engine"]["counters"];
        note["file_bytes_read"] = kc["bytes_moved"]["resident"].get<std::uint64_t>() +
                                  kc["bytes_moved"]["file"].get<std::uint64_t>() + kc["host_copy_fill_bytes"].get<std::uint64_t>();
        note["kept_for_next_run"] = keep && outstanding == 0;
        if (keep) note["held"] = w->held();
        j["session"] = note;
    }
    if (auto * tr = ctx_.tracker) tr->set_counters(component, std::move(j));
    if (keep && outstanding == 0) session_->keep(component, key, std::move(w));
    w.reset();
    if (outstanding != 0)
        throw RuntimeError(plugin_ + ": the offload engine unloaded '" + component + "' in phase '" + phase_name_ +
                           "' with " + std::to_string(outstanding) + " outstanding lease(s) or upload(s)");
}

std::string ModelRun::embeddings_key(const std::string & encoder, const nlohmann::json & key) const {
    nlohmann::json loras = nlohmann::json::array();
    if (const auto l = checkpoint_.find("loras"); l != checkpoint_.end()) loras = *l;
    return digest_of(nlohmann::json{{"plugin", plugin_},
                      {"encoder", encoder},
                      {"identity", component_identity(encoder)},
                      {"files", source_files(component(encoder))},
                      {"loras", loras},
                      {"key", key}});
}

std::optional<NamedTensors> ModelRun::kept_embeddings(const std::string & encoder, const nlohmann::json & key,
                                                      const std::string & phase) {
    if (!session_ || ctx_.dry_run || ctx_.session->embeddings_cache_bytes == 0) return std::nullopt;
    auto t = session_->find_embeddings(embeddings_key(encoder, key));
    if (t) {
        begin_phase(phase);
        note_phase("embeddings_cache", "hit");
        phase_->embeddings_kept = true;
        log(2, "prompt embeddings kept by the server (embeddings cache hit): the " + encoder + " is not loaded");
    }
    return t;
}

void ModelRun::keep_embeddings(const std::string & encoder, const nlohmann::json & key, const NamedTensors & tensors) {
    if (!session_ || ctx_.dry_run || ctx_.session->embeddings_cache_bytes == 0) return;
    session_->keep_embeddings(embeddings_key(encoder, key), tensors);
    note_phase("embeddings_cache", "miss");
}

void ModelRun::note_phase(const std::string & key, nlohmann::json value) {
    if (phase_ && phase_->phase) phase_->phase->note(key, std::move(value));
}

int ModelRun::generations() const {
    return settings().get_optional<int>("runtime.generation_repeats").value_or(1);
}

void ModelRun::begin_generation(int g) {
    generation_ = g;
    if (g > 1) log(2, "generation " + std::to_string(g) + " of " + std::to_string(generations()) + " (weights loaded once)");
}

void ModelRun::begin_phase(const std::string & base) {
    end_phase();
    phase_ = std::make_unique<PhaseState>();
    const std::string name = generation_ > 1 ? base + " (generation " + std::to_string(generation_) + ")" : base;
    phase_name_ = name;
    if (ctx_.tracker) phase_->phase.emplace(ctx_.tracker->phase(name));
    if (device_) {  // the phase's peaks start from what is allocated now
        ddo::torch::AllocationMeter::reset_peak(device_->device());
        if (device_->cuda) ddo::torch::AllocationMeter::reset_peak(c10::Device(c10::kCPU));
        phase_->torch_at_begin = ddo::torch::AllocationMeter::read(device_->device()).current;
    }
    if (!ctx_.dry_run)
        for (auto * w : open_) w->begin_phase(name);
    phase_->sample(open_);
    if (ctx_.progress) ctx_.progress(ProgressEvent{name, 0, 0, 0, 0});
    signal_at_phase_for_tests(name);
}

// Test hook (docs/validation.md): DDO_TEST_SIGNAL_AT_PHASE=<phase> sends this process SIGTERM when that phase begins
// and waits (up to 10 s) until the host's signal watcher has seen it, so that a test interrupts a run at a chosen
// phase deterministically, through the same path as a real SIGTERM. Unset: nothing.
void ModelRun::signal_at_phase_for_tests(const std::string & name) const {
    const char * at = std::getenv("DDO_TEST_SIGNAL_AT_PHASE");
    if (!at || name != at || !ctx_.interrupted) return;
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 1000 && !ctx_.interrupted->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void ModelRun::end_phase() {
    if (!phase_) return;
    try {
        measure_phase(*phase_);
    } catch (const std::exception & e) {
        log(3, std::string("memory forecast: the phase's measured peak could not be recorded: ") + e.what());
    }
    if (phase_->phase) phase_->phase->end();
    phase_.reset();
}

void ModelRun::step(int step, int total) {
    const auto now = Clock::now();
    if (!phase_) begin_phase("steps");
    const double dt = std::chrono::duration<double>(now - phase_->last_step).count();
    const double since = std::chrono::duration<double>(now - phase_->begun).count();
    phase_->last_step = now;
    phase_->sample(open_);
    // What each component's engine did in this step: bytes streamed and compute stalled waiting for uploads.
    nlohmann::json engine = nlohmann::json::object();
    for (const auto * w : open_) {
        const ComponentWeights::Progress now_at = w->progress();
        auto & last = phase_->engine_at_last_step[w->component()];  // {0, 0} at the component's first step
        nlohmann::json e = {{"bytes_streamed", now_at.bytes_streamed - last.first}};
        if (now_at.stall_s) e["stall_s"] = *now_at.stall_s - last.second;
        else { e["stall_s"] = nullptr; e["stall_s_reason"] = now_at.stall_reason; }
        last = {now_at.bytes_streamed, now_at.stall_s.value_or(0.0)};
        engine[w->component()] = std::move(e);
    }
    nlohmann::json extra = {{"engine", std::move(engine)}};
    if (active_step_cache_ && step_cache_stage_open_) {  // a denoising loop's step, not a decode piece's
        extra["cache"] = active_step_cache_->take_step_records();
        if (ctx_.tracker) ctx_.tracker->set_step_cache(step_cache_report(active_step_cache_->summary()));
    }
    if (ctx_.tracker) ctx_.tracker->step(phase_name_, step - 1, dt, std::nullopt, std::move(extra));
    log(1, phase_name_ + " step " + std::to_string(step) + "/" + std::to_string(total));  // the host draws progress
    if (ctx_.progress) ctx_.progress(ProgressEvent{phase_name_, step, total, dt, since});
}

StepCache * ModelRun::step_cache(int steps) {
    if (!step_cache_accepted_)
        throw UsageError(plugin_ + ": step_cache() without accept_step_cache() before workload(); this is a bug in the "
                         "model plugin");
    step_cache_stages_ = nlohmann::json::array();
    step_cache_first_ = nullptr;
    if (step_cache_ && step_cache_->steps() == steps) {
        step_cache_->reset();  // a new generation (runtime.generation_repeats)
        active_step_cache_ = step_cache_.get();
        step_cache_stage_open_ = true;
        step_cache_stages_.push_back({{"phase", phase_name_}, {"steps", steps}, {"cached", true}});
        return step_cache_.get();
    }
    auto settings = step_cache_ ? step_cache_->settings() : StepCacheSettings::read(this->settings());
    if (settings.kind == StepCacheKind::off) return nullptr;
    const bool claimed = step_cache_ != nullptr;  // a later generation after a staged run: the file is claimed
    step_cache_ = std::make_unique<StepCache>(std::move(settings), steps);
    active_step_cache_ = step_cache_.get();
    step_cache_stage_open_ = true;
    step_cache_stages_.push_back({{"phase", phase_name_}, {"steps", steps}, {"cached", true}});
    if (claimed) return step_cache_.get();
    if (step_cache_->settings().kind == StepCacheKind::mag && step_cache_->settings().calibrate) {
        const fs::path p = (ctx_.output_dir.empty() ? fs::current_path() : ctx_.output_dir) / "mag_ratios.toml";
        std::error_code ec;
        if (!ctx_.report_path.empty() &&
            fs::weakly_canonical(fs::absolute(p), ec) == fs::weakly_canonical(fs::absolute(ctx_.report_path), ec))
            throw UsageError("cache.calibrate: " + p.string() + " is the report file (--report); choose another --report");
        if (fs::exists(p) && !ctx_.overwrite)
            throw UsageError("cache.calibrate writes " + p.string() + ", which exists; pass --overwrite to replace it, "
                             "or choose another --output");
        fs::create_directories(p.parent_path(), ec);
        calibration_lock_ = PathLock::acquire(p, "output");
        calibration_file_ = p;
    }
    if (ctx_.tracker) ctx_.tracker->set_step_cache(step_cache_->summary());
    return step_cache_.get();
}

StepCache * ModelRun::step_cache_stage(int steps) {
    if (!step_cache_ || step_cache_stages_.empty()) return nullptr;
    finish_step_cache();  // the stage before, if the plugin has not
    auto settings = step_cache_->settings();
    nlohmann::json stage = {{"phase", phase_name_}, {"steps", steps}};
    if (steps < settings.min_steps && !settings.allow_few_steps) {
        active_step_cache_ = nullptr;
        stage["cached"] = false;
        stage["reason"] = "a " + std::to_string(steps) + "-step schedule, below cache.min_steps = " +
                          std::to_string(settings.min_steps) + ": this stage runs without the cache (set "
                          "cache.allow_few_steps = true to cache it too)";
        step_cache_stages_.push_back(std::move(stage));
        // Requested and effective per stage in the report's adjustments (the first stage cached, this one not).
        const std::string kind = to_string(settings.kind);
        nlohmann::json effective = nlohmann::json::object();
        for (const auto & st : step_cache_stages_)
            effective[st.at("phase").get<std::string>()] = st.at("cached").get<bool>() ? kind : "off";
        adjust("cache.kind", kind, effective, phase_name_ + ": " + step_cache_stages_.back().at("reason").get<std::string>());
        if (ctx_.tracker) ctx_.tracker->set_step_cache(step_cache_report(nullptr));
        return nullptr;
    }
    // A mag calibration measures every stage; mag_ratios.toml holds the first stage's (finish_step_cache).
    step_cache_ = std::make_unique<StepCache>(std::move(settings), steps);
    active_step_cache_ = step_cache_.get();
    step_cache_stage_open_ = true;
    stage["cached"] = true;
    step_cache_stages_.push_back(std::move(stage));
    if (ctx_.tracker) ctx_.tracker->set_step_cache(step_cache_report(step_cache_->summary()));
    return step_cache_.get();
}

nlohmann::json ModelRun::step_cache_report(nlohmann::json current) const {
    // One stage: its summary, as it always was. Several: the first stage's summary with stages[] beside it, each
    // stage's own summary (or why it ran uncached) in it.
    if (step_cache_stages_.size() <= 1) return current;
    nlohmann::json out = step_cache_first_;
    out["stages"] = step_cache_stages_;
    if (!current.is_null()) out["stages"].back()["summary"] = std::move(current);
    return out;
}

void ModelRun::refuse_step_cache(const std::string & why) const {
    const auto kind = settings().get_optional<std::string>("cache.kind");
    if (!kind || *kind == "off") return;
    throw UsageError("cache.kind = \"" + *kind + "\" (" + settings().at("cache.kind").provenance.to_string() +
                     "): plugin '" + plugin_ + "' cannot honour it: " + why + "; use --cache off");
}

void ModelRun::finish_step_cache() {
    if (!active_step_cache_ || !step_cache_stage_open_) return;
    step_cache_stage_open_ = false;
    auto summary = active_step_cache_->summary();
    const bool first_stage = step_cache_stages_.size() <= 1;
    // The stage's phase is the one its loop ran in (step_cache() is called while planning, before it opens).
    if (!step_cache_stages_.empty()) step_cache_stages_.back()["phase"] = phase_name_;
    if (!calibration_file_.empty() && generation_ == 1 && first_stage) {
        const auto cal = step_cache_->calibration();
        if (cal.empty() || cal.front().second.empty())
            throw RuntimeError("cache.calibrate: no pass was calibrated; the denoising loop ran no step");
        std::ostringstream t;
        t.precision(9);
        t << "# MagCache ratios measured by ddo-host (" << plugin_ << ", " << step_cache_->steps()
          << " steps, branch " << cal.front().first << "; docs/presets.md, [cache]).\n"
          << "# Inherit this file from a preset (inherits = [\"mag_ratios.toml\"]) to run the cache on them.\n"
          << "schema_version = 1\n"
          << "description = \"MagCache ratios of " << model_dir().filename().string() << " at "
          << step_cache_->steps() << " steps (" << plugin_ << ")\"\n\n[cache]\nkind = \"mag\"\nmag_ratios = [";
        for (std::size_t i = 0; i < cal.front().second.size(); ++i) t << (i ? ", " : "") << cal.front().second[i];
        t << "]\n";
        const std::string text = t.str();
        write_text_atomically(calibration_file_, text, "calibration file");
        if (ctx_.tracker)
            ctx_.tracker->add_output_written(calibration_file_, "application/toml", text.size(),
                                             sha256_hex(text.data(), text.size()),
                                             {{"role", "mag_ratios"}, {"branch", cal.front().first}});
        summary["calibration_file"] = calibration_file_.string();
    }
    if (first_stage) step_cache_first_ = summary;
    if (!step_cache_stages_.empty()) step_cache_stages_.back()["summary"] = summary;
    if (ctx_.tracker) ctx_.tracker->set_step_cache(step_cache_report(std::move(summary)));
}

void ModelRun::check_interrupted(const std::string & where) const {
    if (ctx_.interrupted && ctx_.interrupted->load())
        throw Error(ExitCode::interrupted, plugin_ + ": interrupted " + where);
}

std::function<void(const std::string &)> ModelRun::decode_stage_check() const {
    return [this](const std::string & stage) { check_interrupted("while decoding (after " + stage + ")"); };
}

std::function<void(int, int)> ModelRun::decode_piece_progress(const std::string & unit) {
    auto released = std::make_shared<platform::HeapReleaseTotals>();
    return [this, unit, released](int done, int total) {
        check_interrupted("while decoding " + unit + " " + std::to_string(done) + " of " + std::to_string(total));
        // The piece's temporaries are freed by now (its output lives on): Note [Host heap between pieces].
        released->add(platform::release_free_heap_pages());
        note_phase("host_heap_release", released->json());
        step(done, total);
    };
}

void ModelRun::adjust(const std::string & key, const nlohmann::json & requested, const nlohmann::json & effective,
                      const std::string & reason) {
    if (ctx_.tracker) ctx_.tracker->add_adjustment(key, requested, effective, reason);
    log(3, key + ": " + requested.dump() + " requested, " + effective.dump() + " used: " + reason);
}

void ModelRun::record_workload(nlohmann::json workload) {
    workload_ = workload;
    if (ctx_.tracker) ctx_.tracker->set_workload(std::move(workload));
}

void ModelRun::record_route(const std::string & component, const std::string & intended, const std::string & executed,
                            const std::string & note) {
    if (!ctx_.tracker) return;
    ctx_.tracker->set_route_intended(component, intended);
    ctx_.tracker->set_route_executed(component, executed, note);
}

void ModelRun::not_used(const std::string & component, const std::string & reason) {
    if (ctx_.tracker) ctx_.tracker->set_route_unused(component, reason);
    log(3, component + " not used: " + reason);
}

void ModelRun::not_used_except(const std::vector<std::string> & used, const std::string & reason) {
    if (!ctx_.settings) return;
    for (const auto & c : settings().components())
        if (std::find(used.begin(), used.end(), c) == used.end()) not_used(c, reason);
}

void ModelRun::record_counters(const std::string & component, nlohmann::json counters) {
    if (ctx_.tracker) ctx_.tracker->set_counters(component, std::move(counters));
}

void ModelRun::record_checkpoint(const std::vector<std::string> & components) {
    for (const auto & [c, file] : ctx_.component_files)
        if (std::find(components.begin(), components.end(), c) == components.end())
            throw UsageError("--" + store::component_flag(c) + " " + file.string() + ": this " + plugin_ +
                             " run does not read the " + c + (c == "text_encoder" && !ctx_.prompt_embeds.empty()
                                                                  ? " (--prompt-embeds gives the embeddings)"
                                                                  : "") +
                             "; drop the flag");
    store::IdentityOptions o;
    o.hash_weights = ctx_.hash_weights;
    checkpoint_["path"] = fs::absolute(ctx_.model_dir).string();
    checkpoint_["identity"] = store::checkpoint_identity(ctx_.model_dir, components, o, ctx_.component_files);
    checkpoint_["hash_weights"] = ctx_.hash_weights;
    checkpoint_["inputs"] = inputs_;
    if (ctx_.tracker) ctx_.tracker->set_checkpoint(checkpoint_);
    open_loras(components);
}

void ModelRun::set_original_names(const std::string & component, std::vector<std::pair<std::string, std::string>> renames) {
    original_names_[component] = std::move(renames);
}

// Note [Applying LoRA]: every file opened and matched against every component the run reads, before anything loads.
void ModelRun::open_loras(const std::vector<std::string> & components) {
    const auto & s = settings();
    if (!s.has("lora.adapters") || s.at("lora.adapters").value.is_null()) return;
    const auto & v = s.at("lora.adapters");
    const std::string where = "lora.adapters (" + v.provenance.to_string() + ")";
    std::vector<LoraRequest> requests;
    for (const auto & e : v.value) {
        auto r = parse_lora_request(e.get<std::string>(), where);
        // A relative path in a preset file is relative to that file.
        if (v.provenance.layer == SettingLayer::preset && r.path.is_relative() && !v.provenance.source.empty())
            r.path = fs::path(v.provenance.source).parent_path() / r.path;
        if (!fs::is_regular_file(r.path))
            throw UsageError(where + ": " + r.path.string() + ": no such file; give the LoRA's .safetensors path");
        requests.push_back(std::move(r));
    }
    if (requests.empty()) return;
    loras_ = LoraAdapters::open(requests);
    checkpoint_["loras"] = loras_.to_json();
    if (ctx_.tracker) ctx_.tracker->set_checkpoint(checkpoint_);
    for (const auto & c : components) {
        if (c != "transformer" && c != "text_encoder" && c != "connectors") continue;  // the components LoRAs adapt
        auto src = component(c);
        if (!src.replaced() && !fs::is_directory(src.dir)) continue;
        const auto it = original_names_.find(c);
        if (src.replaced() && it != original_names_.end()) src.renames = it->second;  // a file in the original names
        const auto store = store::WeightStore::open(src);
        const auto enc = store::ComponentEncodings::detect(store);
        loras_.match(c, enc, it == original_names_.end() ? std::vector<std::pair<std::string, std::string>>{} : it->second);
    }
    checkpoint_["loras"] = loras_.to_json();
    if (ctx_.tracker) ctx_.tracker->set_checkpoint(checkpoint_);
    const bool allow = s.has("lora.allow_unmatched") && s.at("lora.allow_unmatched").value == true;
    const auto warnings = loras_.check(allow);
    if (!warnings.empty()) {
        checkpoint_["lora_warnings"] = warnings;
        if (ctx_.tracker) ctx_.tracker->set_checkpoint(checkpoint_);
        for (const auto & w : warnings) log(3, "LoRA (lora.allow_unmatched): " + w);
    }
}

std::shared_ptr<ComponentLora> ModelRun::lora(const std::string & component, at::ScalarType dtype) {
    if (loras_.empty()) return nullptr;
    const auto it = lora_loaded_.find(component);
    if (it != lora_loaded_.end()) return it->second;
    const auto & s = settings();
    const bool merge = s.has("lora.apply") && s.at("lora.apply").value == "merge";
    auto l = loras_.load(component, dtype, device().device(), merge);
    lora_loaded_[component] = l;
    return l;
}

void ModelRun::add_checkpoint_facts(const nlohmann::json & facts) {
    for (const auto & [k, v] : facts.items()) checkpoint_["facts"][k] = v;
    if (ctx_.tracker) ctx_.tracker->set_checkpoint(checkpoint_);
}

void ModelRun::record_input(const std::string & role, const fs::path & file) {
    inputs_[role] = store::input_identity(file);
    checkpoint_["inputs"] = inputs_;
    if (ctx_.tracker && checkpoint_.contains("identity")) ctx_.tracker->set_checkpoint(checkpoint_);
}

std::vector<ConditionImage> ModelRun::condition_images(const media::ImageLimits & limits) {
    std::vector<ConditionImage> out;
    const auto & s = settings();
    if (!s.has("workload.images") || s.at("workload.images").value.is_null()) return out;
    const auto & v = s.at("workload.images");
    const std::string where = "workload.images (" + v.provenance.to_string() + ")";
    for (const auto & e : v.value) {
        auto r = parse_condition_image(e.get<std::string>(), where);
        // A relative path in a preset file is relative to that file.
        if (v.provenance.layer == SettingLayer::preset && r.path.is_relative() && !v.provenance.source.empty())
            r.path = fs::path(v.provenance.source).parent_path() / r.path;
        if (!fs::is_regular_file(r.path))
            throw UsageError(where + ": image " + r.path.string() + ": no such file; give a PNG, JPEG or WebP path");
        const std::string role = "image_" + std::to_string(out.size());
        record_input(role, r.path);
        inputs_[role]["frame"] = r.frame;
        checkpoint_["inputs"] = inputs_;
        if (ctx_.tracker && checkpoint_.contains("identity")) ctx_.tracker->set_checkpoint(checkpoint_);
#if DDO_MODEL_WITH_MEDIA
        ConditionImage c{r.path, r.frame, media::read_image(r.path, limits)};
#else
        (void)limits;
        throw UsageError(where + ": image " + r.path.string() + ": this build has no image input (configured with "
                         "DDO_WITH_MEDIA=OFF: no FFmpeg libraries); use a build with them");
        ConditionImage c;
#endif
        const auto & im = c.image;
        auto & j = inputs_[role];
        j["format"] = im.format;
        j["source_width"] = im.source_width;
        j["source_height"] = im.source_height;
        j["bit_depth"] = im.bit_depth;
        j["source_channels"] = im.source_channels;
        j["source_color"] = im.source_color;
        j["has_alpha"] = im.has_alpha;
        j["orientation"] = im.orientation;
        j["width"] = im.width;
        j["height"] = im.height;
        checkpoint_["inputs"] = inputs_;
        if (ctx_.tracker && checkpoint_.contains("identity")) ctx_.tracker->set_checkpoint(checkpoint_);
        out.push_back(std::move(c));
    }
    return out;
}

void ModelRun::record_image_preprocess(std::size_t index, const nlohmann::json & preprocess) {
    const std::string role = "image_" + std::to_string(index);
    for (const auto & [k, val] : preprocess.items()) inputs_[role]["preprocess"][k] = val;
    checkpoint_["inputs"] = inputs_;
    if (ctx_.tracker && checkpoint_.contains("identity")) ctx_.tracker->set_checkpoint(checkpoint_);
}

std::vector<fs::path> ModelRun::plan_images(int count, const std::string & stem) {
    std::vector<fs::path> paths;
    for (int i = 0; i < count; ++i) {
        fs::path p;
        if (!ctx_.output_file.empty()) {
            p = i == 0 ? ctx_.output_file
                       : ctx_.output_file.parent_path() / (ctx_.output_file.stem().string() + "_" + std::to_string(i) +
                                                           ctx_.output_file.extension().string());
        } else {
            p = ctx_.output_dir / (count == 1 ? stem + ".png" : stem + "_" + std::to_string(i) + ".png");
        }
        paths.push_back(p);
    }
    claim_outputs(paths, "--output");
    return paths;
}

namespace {

// The conversion of a frame pattern: its position and length ("%05d" at 7), or UsageError naming -o.
std::pair<size_t, size_t> frame_conversion(const fs::path & pattern) {
    const std::string name = pattern.filename().string();
    const auto bad = [&](const std::string & why) {
        return UsageError("-o " + pattern.string() + ": " + why + "; a frame pattern names one file per frame with one "
                          "%d conversion (frames/%05d.png: frames/00000.png, frames/00001.png, ...)");
    };
    if (pattern.extension() != ".png") throw bad("frames are written as PNG (.png)");
    std::optional<std::pair<size_t, size_t>> found;
    for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] != '%') continue;
        if (i + 1 < name.size() && name[i + 1] == '%') {
            ++i;
            continue;
        }
        size_t j = i + 1;
        while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
        if (j >= name.size() || name[j] != 'd' || j - i - 1 > 2) throw bad("'" + name.substr(i) + "' is not a %d or %0Nd conversion");
        if (found) throw bad("more than one conversion");
        found = std::pair{i, j + 1 - i};
        i = j;
    }
    if (!found) throw bad("no %d conversion");
    return *found;
}

fs::path frame_file(const fs::path & pattern, std::int64_t i) {
    const std::string name = pattern.filename().string();
    const auto [at, len] = frame_conversion(pattern);
    const std::string spec = name.substr(at + 1, len - 2);  // "05" of "%05d", "" of "%d"
    const bool zeros = !spec.empty() && spec[0] == '0';
    const size_t width = spec.empty() ? 0 : size_t(std::stoi(spec));
    std::string num = std::to_string(i);
    if (num.size() < width) num.insert(0, width - num.size(), zeros ? '0' : ' ');
    std::string out;
    for (size_t k = 0; k < name.size(); ++k) {
        if (k == at) {
            out += num;
            k += len - 1;
        } else if (name[k] == '%' && k + 1 < name.size() && name[k + 1] == '%') {
            out += '%';
            ++k;
        } else {
            out += name[k];
        }
    }
    return pattern.parent_path() / out;
}

}  // namespace

bool ModelRun::frame_pattern() const {
    if (ctx_.output_file.empty() || ctx_.output_file.filename().string().find('%') == std::string::npos) return false;
    frame_conversion(ctx_.output_file);
    return true;
}

std::vector<fs::path> ModelRun::plan_frame_files(std::int64_t count, const fs::path & beside) {
    const fs::path pattern = frame_pattern() ? ctx_.output_file
                                             : beside.parent_path() / (beside.stem().string() + "_%05d.png");
    std::vector<fs::path> paths;
    std::error_code ec;
    for (std::int64_t i = 0; i < count; ++i) {
        const fs::path p = frame_file(pattern, i);
        if (fs::exists(p) && !ctx_.overwrite)
            throw UsageError("output " + p.string() + " exists; pass --overwrite to replace it, or choose another " +
                             (frame_pattern() ? "-o pattern" : "--output"));
        if (!ctx_.report_path.empty() && fs::weakly_canonical(fs::absolute(p), ec) == fs::weakly_canonical(fs::absolute(ctx_.report_path), ec))
            throw UsageError("output " + p.string() + " is the report file (--report); choose another --report");
        paths.push_back(p);
    }
    if (!paths.empty()) {
        fs::create_directories(paths.front().parent_path(), ec);
        // The first frame stands for the sequence: another run writing the same frames claims it too.
        std::vector<PathLock> locks;
        locks.push_back(PathLock::acquire(paths.front(), "output"));
        frame_locks_ = std::move(locks);
    }
    return paths;
}

std::vector<fs::path> ModelRun::plan_outputs(const std::vector<std::string> & names) {
    std::vector<fs::path> paths;
    const bool pattern = frame_pattern();
    for (size_t i = 0; i < names.size(); ++i) {
        if (ctx_.output_file.empty() || pattern) {
            paths.push_back(ctx_.output_dir / names[i]);
        } else {
            const auto ext = fs::path(names[i]).extension();
            paths.push_back(i == 0 ? ctx_.output_file
                                   : ctx_.output_file.parent_path() / (ctx_.output_file.stem().string() + ext.string()));
        }
    }
    claim_outputs(paths, "--output");
    return paths;
}

void ModelRun::record_output(const fs::path & path, const std::string & media_type, std::uint64_t bytes,
                             const std::string & sha256, nlohmann::json facts) {
    if (ctx_.tracker) ctx_.tracker->add_output_written(path, media_type, bytes, sha256, std::move(facts));
    log(1, "wrote " + path.string());
}

void ModelRun::claim_outputs(const std::vector<fs::path> & paths, const std::string & flag) {
    std::error_code ec;
    for (const auto & p : paths) {
        if (!ctx_.report_path.empty() && fs::weakly_canonical(fs::absolute(p), ec) == fs::weakly_canonical(fs::absolute(ctx_.report_path), ec))
            throw UsageError("output " + p.string() + " is the report file (--report); choose another --report or " + flag);
        if (fs::exists(p) && !ctx_.overwrite)
            throw UsageError("output " + p.string() + " exists; pass --overwrite to replace it, or choose another " + flag);
    }
    if (!paths.empty()) fs::create_directories(paths.front().parent_path(), ec);
    std::vector<PathLock> locks;
    for (const auto & p : paths) locks.push_back(PathLock::acquire(p, "output"));
    output_locks_ = std::move(locks);
    planned_outputs_ = paths;
}

fs::path ModelRun::plan_tensor_file() {
    if (ctx_.output_file.empty())
        throw UsageError(plugin_ + ": no output file: give -o/--output-file FILE (the safetensors file to write)");
    claim_outputs({ctx_.output_file}, "-o");
    return ctx_.output_file;
}

fs::path ModelRun::write_tensors(const std::vector<std::pair<std::string, at::Tensor>> & tensors,
                                 const std::map<std::string, std::string> & metadata) {
    const fs::path p = planned_outputs_.size() == 1 ? planned_outputs_.front() : plan_tensor_file();
    const std::string bytes = encode_safetensors(tensors, metadata);
    write_text_atomically(p, bytes, "tensor file");
    if (ctx_.tracker)
        ctx_.tracker->add_output_written(p, "application/x-safetensors", bytes.size(), sha256_hex(bytes.data(), bytes.size()));
    return p;
}

fs::path ModelRun::plan_latents_file() {
    const fs::path & p = ctx_.save_latents;
    if (p.empty()) throw UsageError(plugin_ + ": no latents file: give --save-latents FILE");
    std::error_code ec;
    if (!ctx_.report_path.empty() && fs::weakly_canonical(fs::absolute(p), ec) == fs::weakly_canonical(fs::absolute(ctx_.report_path), ec))
        throw UsageError("--save-latents " + p.string() + " is the report file (--report); choose another file");
    for (const auto & o : planned_outputs_)
        if (fs::weakly_canonical(fs::absolute(p), ec) == fs::weakly_canonical(fs::absolute(o), ec))
            throw UsageError("--save-latents " + p.string() + " is also an output of this run; choose another file");
    if (fs::exists(p) && !ctx_.overwrite)
        throw UsageError("--save-latents " + p.string() + " exists; pass --overwrite to replace it, or choose another file");
    fs::create_directories(p.parent_path(), ec);
    latents_lock_ = PathLock::acquire(p, "latents file");
    latents_out_ = p;
    return p;
}

fs::path ModelRun::write_latents_file(const std::vector<std::pair<std::string, at::Tensor>> & tensors,
                                      const std::map<std::string, std::string> & metadata, nlohmann::json facts) {
    const fs::path p = latents_out_.empty() ? plan_latents_file() : latents_out_;
    const std::string bytes = encode_safetensors(tensors, metadata);
    write_text_atomically(p, bytes, "latents file");
    if (ctx_.tracker)
        ctx_.tracker->add_output_written(p, "application/x-safetensors", bytes.size(),
                                         sha256_hex(bytes.data(), bytes.size()), std::move(facts));
    log(1, "wrote " + p.string());
    return p;
}

nlohmann::json ModelRun::component_identity(const std::string & component) const {
    const auto id = checkpoint_.find("identity");
    if (id == checkpoint_.end() || !id->contains("components")) return nullptr;
    const auto & c = id->at("components");
    return c.contains(component) ? c.at(component) : nlohmann::json(nullptr);
}

std::vector<fs::path> ModelRun::write_images(const at::Tensor & images, const std::string & stem) {
    if (images.dim() != 4 || images.size(1) < 1 || images.size(1) > 4)
        throw RuntimeError(plugin_ + ": images to write must be [B, C, H, W] with 1 to 4 channels");
    if (generation_ == 1 && planned_outputs_.size() != size_t(images.size(0))) plan_images(int(images.size(0)), stem);
    std::error_code ec;
    fs::create_directories(ctx_.output_dir, ec);
    if (ec) throw RuntimeError(ctx_.output_dir.string() + ": cannot create the output directory (" + ec.message() + ")");
    const auto & s = settings();
    nlohmann::json values = nlohmann::json::object();
    for (const auto & [k, v] : s.values()) values[k] = v.value;
    const auto & b = build_info();
    PngText text{{"Software", "ddo " + b.version + " (" + b.git_revision + ")"},
                 {"ddo:plugin", plugin_},
                 {"ddo:preset", s.preset().effective.empty() ? s.preset().requested : s.preset().effective},
                 {"ddo:report", ctx_.report_path.empty() ? std::string() : fs::absolute(ctx_.report_path).string()},
                 {"ddo:settings", values.dump()}};
    std::vector<fs::path> out;
    const auto pixels = images.detach();
    for (int64_t i = 0; i < pixels.size(0); ++i) {
        check_interrupted("while writing outputs");
        const auto hwc = to_pixels_hwc(pixels[i]);
        const std::string digest = xxh3_128_hex(hwc.data_ptr(), size_t(hwc.numel()) * hwc.element_size());
        if (generation_ > 1) {  // runtime.generation_repeats: compared, not written again
            const bool same = size_t(i) < first_images_.size() && first_images_[size_t(i)] == digest;
            generation_notes_.push_back({{"generation", generation_}, {"image", i}, {"pixels_xxh3_128", digest},
                                         {"identical_to_generation_1", same}});
            if (ctx_.tracker) ctx_.tracker->note("generations", generation_notes_);
            if (!same) log(3, "generation " + std::to_string(generation_) + " image " + std::to_string(i) +
                                  " differs from generation 1's");
            continue;
        }
        first_images_.push_back(digest);
        const auto & path = planned_outputs_.at(size_t(i));
        // Written atomically; the report's sha256 is of the bytes written (not of what is on disk later).
        const auto bytes = write_png(path, hwc.data_ptr<std::uint8_t>(), std::uint32_t(hwc.size(1)),
                                     std::uint32_t(hwc.size(0)), int(hwc.size(2)), text);
        if (ctx_.tracker) ctx_.tracker->add_output_written(path, "image/png", bytes.size(), sha256_hex(bytes.data(), bytes.size()));
        log(1, "wrote " + path.string());
        out.push_back(path);
    }
    return out;
}

}  // namespace ddo::model

// ---- Note [Memory forecast] ----------------------------------------------------------------------------------------

namespace ddo::model {
namespace {

constexpr double kForecastTolerance = 0.15;  // |measured / forecast - 1| beyond it: a warning (docs/metrics.md)

std::string base_phase(const std::string & name) {
    const auto at = name.find(" (generation ");
    return at == std::string::npos ? name : name.substr(0, at);
}

}  // namespace

MachineBudget ModelRun::machine_budget() {
    const auto & spec = ctx_.machine;
    const auto & comps = settings().components();
    const std::string any = std::find(comps.begin(), comps.end(), "transformer") != comps.end() || comps.empty()
                                ? std::string("transformer")
                                : comps.front();
    const auto p = plan(any);
    MachineBudget m;
    m.name = spec.name;
    // A machine given with its device memory is a GPU machine even when this run plans on the CPU: the device side
    // is then held against that memory, not against host RAM.
    m.device_is_host = !device().cuda && !spec.device_bytes;
    m.device = spec.device_bytes ? MemoryBudget{spec.device_bytes, spec.device_source} : device_memory_available(p);
    m.host = spec.host_bytes ? MemoryBudget{spec.host_bytes, spec.host_source} : host_memory_available(p);
    m.link_gb_per_s = spec.link_gb_per_s;
    m.link_source = spec.link_source;
    return m;
}

void ModelRun::forecast_weights(const ComponentPlan & plan, const store::ComponentSource & source,
                                std::vector<GroupSpec> groups, at::ScalarType compute_dtype) {
    if (!forecast_) forecast_ = std::make_unique<MemoryForecast>(device().cuda);
    // Opened for its plan only: no engine phase begins, so nothing is read, uploaded or allocated.
    auto w = ComponentWeights::open(source, std::move(groups), plan, compute_dtype, lora(plan.component, compute_dtype));
    const auto f = w->planned_footprint();
    const auto report = w->report();
    const auto & ep = report.at("engine").at("plan");
    const std::uint64_t streamed = ep.value("pinned_bytes", std::uint64_t(0)) + ep.value("pageable_bytes", std::uint64_t(0)) +
                                   ep.value("file_bytes", std::uint64_t(0));
    forecast_->set_weights(plan.component, f,
                           {{"route", ep.value("route", std::string())},
                            {"device_bytes", f.device},
                            {"host_bytes", f.host},
                            {"resident_bytes", ep.value("resident_bytes", std::uint64_t(0))},
                            {"slots", ep.value("slots", 0)},
                            {"slot_bytes", ep.value("slot_bytes", std::uint64_t(0))},
                            {"staging_slots", ep.value("staging_slots", 0)},
                            {"host_copy_bytes", ep.value("pinned_bytes", std::uint64_t(0)) + ep.value("pageable_bytes", std::uint64_t(0))},
                            {"streamed_bytes_per_pass", streamed}});
}

void ModelRun::forecast_memory(const ForecastShape & asked, const StageModel & model, std::int64_t multiple,
                               std::int64_t frame_step) {
    if (!forecast_) forecast_ = std::make_unique<MemoryForecast>(device().cuda);
    const bool cuda = device().cuda;
    const auto budget = machine_budget();
    const auto phases = forecast_->evaluate(model(asked));
    nlohmann::json machine = {{"name", budget.name.empty() ? nlohmann::json(nullptr) : nlohmann::json(budget.name)},
                              {"device", budget.device.to_json()},
                              {"host", budget.host.to_json()},
                              {"device_is_host", budget.device_is_host},
                              {"link_gb_per_s", budget.link_gb_per_s ? nlohmann::json(*budget.link_gb_per_s) : nlohmann::json(nullptr)},
                              {"link_source", budget.link_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(budget.link_source)}};
    forecast_json_ = {{"shape", {{"width", asked.width}, {"height", asked.height}, {"frames", asked.frames}}},
                      {"device", cuda ? "cuda" : "cpu"},
                      {"machine", machine},
                      {"weights", forecast_->weights_json()},
                      {"phases", MemoryForecast::phases_json(phases, budget, cuda)},
                      {"tolerance", kForecastTolerance},
                      {"warnings", nlohmann::json::array()},
                      {"unstated", nlohmann::json::array()},
                      {"model", "Note [Memory forecast] (docs/architecture.md)"}};
    // The link-bound lower bound of one pass over each component's streamed weights, where the link is known.
    std::string link_line;
    if (budget.link_gb_per_s && *budget.link_gb_per_s > 0) {
        nlohmann::json link = nlohmann::json::object();
        for (const auto & [c, w] : forecast_->weights_json().items()) {
            const double bytes = w.value("streamed_bytes_per_pass", 0.0);
            const double seconds = bytes / (*budget.link_gb_per_s * 1e9);
            link[c] = {{"streamed_bytes_per_pass", std::uint64_t(bytes)}, {"seconds_per_pass", seconds}};
            if (bytes > 0) {
                char buf[96];
                std::snprintf(buf, sizeof buf, "%s streams %.0f MiB per pass: at least %.3f s at %.1f GB/s", c.c_str(),
                              bytes / 1048576.0, seconds, *budget.link_gb_per_s);
                link_line += (link_line.empty() ? "" : "; ") + std::string(buf);
            }
        }
        forecast_json_["link_bound"] = link;
    }
    forecast_outcome_ = ForecastOutcome{phases, MemoryForecast::first_excess(phases, budget), asked, model, multiple,
                                        frame_step};
    if (!fit_trial_) {  // the console: one line per phase (not for each rung the fit ladder tries)
        for (const auto & p : phases) {
            std::string line = "forecast " + p.phase + ": device " + format_mib(p.peak.device) + " (weights " +
                               format_mib(p.weights.device) + "), host " + format_mib(p.peak.host);
            const auto & b = budget.device_is_host ? budget.host : budget.device;
            if (b.bytes) line += "; " + std::string(budget.device_is_host ? "host" : "device") + " budget " + format_mib(*b.bytes);
            log(2, line);
        }
        if (!link_line.empty()) log(2, "forecast link bound: " + link_line);
    }
    if (auto * tr = ctx_.tracker) tr->set_forecast(forecast_json_);
    if (!fitting_ && forecast_outcome_->excess) refuse_forecast(nlohmann::json::array());
}

namespace {

// One rung of the fit ladder (Note [Fitting a run]): a setting and what it trades.
struct FitRung {
    std::string key, value, why;
};

// Cheapest in time first: the VAE's decode in pieces (decode only), then the transformer's weights streamed from
// host memory (a transfer per step for what is not resident), then streamed from the checkpoint file (a read per
// step). A rung that asks what the settings already say is left out.
std::vector<FitRung> fit_ladder(const ResolvedSettings & s, bool video) {
    std::vector<FitRung> ladder;
    const std::string vae = s.get_optional<std::string>("vae.strategy").value_or("auto");
    const std::string pieces = video ? "temporal_stream" : "tiled";
    if (vae != "tiled" && vae != "temporal_stream")
        ladder.push_back({"vae.strategy", pieces,
                          video ? "the VAE decodes the clip in latent windows, each tiled (the decode only: windows "
                                  "and tiles instead of one piece)"
                                : "the VAE decodes in tiles (the decode only: tiles instead of one piece)"});
    const auto route = s.route("transformer");
    if (route == Route::resident || route == Route::component)
        ladder.push_back({"components.transformer.route", "dynamic",
                          "the transformer keeps what its budget holds resident and streams the rest from host memory "
                          "each step"});
    if (route != Route::disk)
        ladder.push_back({"components.transformer.route", "disk",
                          "the transformer's blocks stream from the checkpoint file each step (host memory holds only "
                          "the staging slots)"});
    return ladder;
}

// Each phase's peaks, short, and whether it is over its budget: what the fit ladder's rungs are compared by.
nlohmann::json phase_peaks(const std::vector<PhaseForecast> & phases, const MachineBudget & budget) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto & p : phases)
        j.push_back({{"phase", p.phase}, {"device_bytes", p.peak.device}, {"host_bytes", p.peak.host},
                     {"over", MemoryForecast::first_excess({p}, budget).has_value()}});
    return j;
}

// Whether `after` forecasts lower any phase that `before` has over its budget (a rung is applied only for those).
bool lowers_a_phase_over(const nlohmann::json & before, const nlohmann::json & after) {
    for (std::size_t i = 0; i < before.size() && i < after.size(); ++i)
        if (before[i].value("over", false) &&
            (after[i]["device_bytes"].get<std::uint64_t>() < before[i]["device_bytes"].get<std::uint64_t>() ||
             after[i]["host_bytes"].get<std::uint64_t>() < before[i]["host_bytes"].get<std::uint64_t>()))
            return true;
    return false;
}

// A search's result in the report: {"largest_size": {width, height} or null, "most_frames": n or null}.
nlohmann::json fitting_json(const FittingShape & f) {
    return {{"largest_size", f.size ? nlohmann::json({{"width", f.size->width}, {"height", f.size->height}}) : nlohmann::json(nullptr)},
            {"most_frames", f.frames ? nlohmann::json(f.frames->frames) : nlohmann::json(nullptr)}};
}

// The same, read back (the asked shape supplies what the report leaves out).
FittingShape fitting_of(const nlohmann::json & j, const ForecastShape & asked) {
    FittingShape f;
    if (j.value("largest_size", nlohmann::json()).is_object())
        f.size = ForecastShape{j["largest_size"]["width"].get<std::int64_t>(), j["largest_size"]["height"].get<std::int64_t>(),
                               asked.frames};
    if (j.value("most_frames", nlohmann::json()).is_number())
        f.frames = ForecastShape{asked.width, asked.height, j["most_frames"].get<std::int64_t>()};
    return f;
}

// "WxH [with F frames] fits; at WxH up to N frames fit" for what a search found (empty: nothing).
std::string fitting_text(const FittingShape & f, const ForecastShape & asked) {
    std::string t;
    if (f.size)
        t = std::to_string(f.size->width) + "x" + std::to_string(f.size->height) +
            (asked.frames > 1 ? " with " + std::to_string(asked.frames) + " frames" : std::string()) + " fits";
    if (f.frames)
        t += std::string(t.empty() ? "" : "; ") + "at " + std::to_string(asked.width) + "x" + std::to_string(asked.height) +
             " up to " + std::to_string(f.frames->frames) + " frames fit";
    return t;
}

std::string excess_text(const MemoryForecast::Excess & e) {
    return "phase '" + e.phase + "' " + format_mib(e.forecast) + " over the " + e.side + " budget of " + format_mib(e.budget);
}

}  // namespace

bool ModelRun::fit(const std::function<void()> & plan_and_forecast) {
    const std::string policy = settings().get_optional<std::string>("fit.policy").value_or("refuse");
    struct Reset {
        bool & b;
        ~Reset() { b = false; }
    } reset{fitting_};
    fitting_ = true;
    forecast_outcome_.reset();
    // A route the declared machine cannot hold fails in the planner: under auto that is a rung's work too.
    std::optional<std::string> planner_refusal;
    try {
        plan_and_forecast();
    } catch (const UsageError & e) {
        if (policy != "auto") throw;
        planner_refusal = e.what();
    }
    if (!planner_refusal && (!forecast_outcome_ || !forecast_outcome_->excess)) return false;  // fits, or no forecast
    if (policy == "off") {
        const std::string w = excess_text(*forecast_outcome_->excess) + "; fit.policy = off: the run goes on";
        forecast_json_["warnings"].push_back(w);
        forecast_json_["fit"] = {{"policy", "off"}, {"over", w}};
        if (auto * tr = ctx_.tracker) tr->set_forecast(forecast_json_);
        log(3, "memory forecast: " + w);
        return false;
    }
    const auto original = forecast_outcome_;
    const nlohmann::json original_json = forecast_json_;
    // The weights as asked: each rung plans them again (forecast_weights), and a refusal's largest size is searched
    // with the asked settings' weights, not the last rung's.
    const std::optional<MemoryForecast> original_weights = forecast_ ? std::optional(*forecast_) : std::nullopt;
    const std::string over = planner_refusal ? *planner_refusal : excess_text(*original->excess);
    const bool video = original ? original->asked.frames > 1 : false;
    nlohmann::json tried = nlohmann::json::array();
    std::vector<FitRung> applied;
    auto current = std::make_unique<ResolvedSettings>(settings());
    const auto budget = machine_budget();
    std::optional<nlohmann::json> previous =
        original ? std::optional(phase_peaks(original->phases, budget)) : std::nullopt;
    bool fits = false;
    // The weights and stage model under the rungs applied so far: what fits with them when no rung fits the workload.
    std::optional<MemoryForecast> applied_weights;
    std::optional<ForecastOutcome> applied_outcome;
    for (const auto & rung : fit_ladder(settings(), video)) {
        auto trial = std::make_unique<ResolvedSettings>(*current);
        trial->set(rung.key, ResolvedValue{rung.value, Provenance{SettingLayer::fit, "fit.policy = " + policy}});
        fitted_settings_ = std::move(trial);
        forecast_outcome_.reset();
        nlohmann::json entry = {{"key", rung.key}, {"value", rung.value}, {"why", rung.why}};
        fit_trial_ = true;
        try {
            plan_and_forecast();
        } catch (const UsageError & e) {
            entry["refused"] = e.what();
        }
        fit_trial_ = false;
        if (!forecast_outcome_ || entry.contains("refused")) {
            tried.push_back(entry);
            fitted_settings_ = std::make_unique<ResolvedSettings>(*current);
            continue;
        }
        const auto peaks = phase_peaks(forecast_outcome_->phases, budget);
        entry["phases"] = peaks;
        entry["fits"] = !forecast_outcome_->excess;
        if (forecast_outcome_->excess) entry["over"] = excess_text(*forecast_outcome_->excess);
        if (previous && !lowers_a_phase_over(*previous, peaks)) {  // not worth its time
            entry["effect"] = "none: no phase over its budget is forecast lower";
            tried.push_back(entry);
            fitted_settings_ = std::make_unique<ResolvedSettings>(*current);
            continue;
        }
        tried.push_back(entry);
        applied.push_back(rung);
        applied_weights = *forecast_;
        applied_outcome = forecast_outcome_;
        previous = peaks;
        current = std::make_unique<ResolvedSettings>(*fitted_settings_);
        if (!forecast_outcome_->excess) {
            fits = true;
            break;
        }
    }
    if (policy == "auto" && fits) {
        for (const auto & rung : applied) {
            const nlohmann::json requested = ctx_.settings->has(rung.key) ? ctx_.settings->at(rung.key).value : nlohmann::json(nullptr);
            adjust(rung.key, requested, rung.value, "fit.policy = auto: " + over + " (memory forecast); " + rung.why);
        }
        forecast_json_["fit"] = {{"policy", "auto"}, {"over", over}, {"tried", tried}, {"applied", applied.size()}};
        if (auto * tr = ctx_.tracker) tr->set_forecast(forecast_json_);
        for (const auto & p : forecast_outcome_->phases)
            log(2, "forecast " + p.phase + " (fitted): device " + format_mib(p.peak.device) + ", host " + format_mib(p.peak.host));
        return true;
    }
    // Refused: the forecast as asked, with every rung tried.
    fitted_settings_.reset();
    if (planner_refusal) {
        std::string msg = *planner_refusal + " fit.policy = auto tried:";
        for (const auto & t : tried)
            msg += " " + t["key"].get<std::string>() + " = " + t["value"].get<std::string>() + " (" +
                   (t.contains("refused") ? t["refused"].get<std::string>() : t.value("over", std::string("fits"))) + ");";
        msg += " none fits this machine.";
        throw UsageError(msg);
    }
    forecast_outcome_ = original;
    forecast_json_ = original_json;
    forecast_json_["fit"] = {{"policy", policy}, {"tried", tried}};
    if (applied_weights && applied_outcome) {  // what fits with every rung that helped (refuse_forecast says it)
        std::string rungs;
        for (const auto & r : applied) rungs += (rungs.empty() ? "" : ", ") + r.key + " = " + r.value;
        const auto & o = *applied_outcome;
        auto j = fitting_json(largest_fitting(*applied_weights, o.model, o.asked, budget, o.multiple, o.frame_step,
                                              kForecastTolerance));
        j["settings"] = rungs;
        forecast_json_["fit"]["with_applied"] = j;
    }
    if (original_weights) *forecast_ = *original_weights;
    refuse_forecast(tried);
}

void ModelRun::refuse_forecast(const nlohmann::json & tried) {
    const auto & o = *forecast_outcome_;
    const auto & excess = *o.excess;
    const auto & asked = o.asked;
    const auto budget = machine_budget();
    const auto fitting = largest_fitting(*forecast_, o.model, asked, budget, o.multiple, o.frame_step, kForecastTolerance);
    const auto & b = excess.side == "device" ? budget.device : budget.host;
    std::string msg = plugin_ + ": phase '" + excess.phase + "' needs " + format_mib(excess.forecast) + " of " +
                      (budget.device_is_host ? std::string("host memory (device and host together, on the CPU)")
                                             : excess.side + " memory") +
                      " by the memory forecast, over the budget of " + format_mib(excess.budget) + " (" + b.source +
                      "); nothing was loaded.";
    const std::string fits = fitting_text(fitting, asked);
    if (fitting.size)
        msg += " With the forecast's tolerance (" + nlohmann::json(kForecastTolerance).dump() + ") to spare, at this preset " +
               fits + ".";
    else
        msg += " No size at this preset fits" + (fits.empty() ? std::string() : "; " + fits) + ".";
    // The settings of the fit ladder, each with its forecast (cumulative, cheapest in time first).
    std::string with;
    std::string fitting_settings;
    for (const auto & t : tried) {
        // The rungs are cumulative: `with` is the ones applied so far and this one; one refused or without effect is
        // not kept for the next.
        const std::string rung = t["key"].get<std::string>() + " = " + t["value"].get<std::string>();
        const std::string kept = with;
        with += (with.empty() ? "" : ", then ") + rung;
        if (t.contains("refused")) {
            msg += " With " + with + ": refused (" + t["refused"].get<std::string>() + ").";
            with = kept;
            continue;
        }
        if (t.contains("effect")) {
            msg += " With " + with + ": no phase's forecast changes.";
            with = kept;
            continue;
        }
        std::string peaks;
        for (const auto & p : t["phases"])
            peaks += (peaks.empty() ? "" : ", ") + p["phase"].get<std::string>() + " " +
                     format_mib(budget.device_is_host ? p["host_bytes"].get<std::uint64_t>() + p["device_bytes"].get<std::uint64_t>()
                                                      : p[excess.side + "_bytes"].get<std::uint64_t>());
        msg += " With " + with + ": " + peaks + (t["fits"].get<bool>() ? " (fits)." : " (" + t["over"].get<std::string>() + ").");
        if (t["fits"].get<bool>()) fitting_settings = with;
    }
    if (!fitting_settings.empty())
        msg += " --fit auto (fit.policy = auto) applies " + fitting_settings + " and runs.";
    else if (forecast_json_.contains("fit") && forecast_json_["fit"].contains("with_applied")) {
        // No rung fitted the workload: what fits with the rungs that helped (fit() searched it).
        const auto & w = forecast_json_["fit"]["with_applied"];
        const std::string t = fitting_text(fitting_of(w, asked), asked);
        if (!t.empty()) msg += " With " + w["settings"].get<std::string>() + ": " + t + ".";
    }
    msg += " `ddo-host plan` with the same flags prints every phase's forecast (Note [Memory forecast]).";
    auto refused = fitting_json(fitting);
    refused.update({{"phase", excess.phase}, {"side", excess.side}, {"forecast_bytes", excess.forecast},
                    {"budget_bytes", excess.budget},
                    {"settings_that_fit", fitting_settings.empty() ? nlohmann::json(nullptr) : nlohmann::json(fitting_settings)}});
    forecast_json_["refused"] = refused;
    if (auto * tr = ctx_.tracker) tr->set_forecast(forecast_json_);
    throw UsageError(msg);
}

namespace {

// A forecast phase's `ratio` (measured / forecast per side; 1 when both are 0) set on its report entry, and the
// warnings: a ratio beyond the tolerance, or bytes measured where nothing was forecast.
std::vector<std::string> compare_with_forecast(nlohmann::json & entry, const std::string & phase,
                                               std::optional<std::uint64_t> device_bytes,
                                               std::optional<std::uint64_t> host_bytes) {
    std::vector<std::string> warnings;
    for (const char * side : {"device", "host"}) {
        const std::uint64_t f = entry[side]["forecast_bytes"].get<std::uint64_t>();
        const auto m = std::string(side) == "device" ? device_bytes : host_bytes;
        nlohmann::json r = nullptr;
        if (m && f > 0) r = double(*m) / double(f);
        else if (m && *m == 0) r = 1.0;
        entry["ratio"][side] = r;
        if (r.is_number() && std::abs(r.get<double>() - 1.0) > kForecastTolerance)
            warnings.push_back("phase '" + phase + "' " + side + ": measured " + format_mib(*m) + ", forecast " +
                               format_mib(f) + " (ratio " + r.dump() + ", beyond the tolerance " +
                               nlohmann::json(kForecastTolerance).dump() + ")");
        else if (r.is_null() && m && f == 0 && *m > 0)
            warnings.push_back("phase '" + phase + "' " + side + ": measured " + format_mib(*m) + " where nothing was forecast");
    }
    return warnings;
}

}  // namespace

void ModelRun::measure_phase(PhaseState & phase) {
    if (forecast_json_.is_null() || ctx_.dry_run || !device_) return;
    phase.sample(open_);
    auto & phases = forecast_json_["phases"];
    const std::string base = base_phase(phase_name_);
    nlohmann::json * entry = nullptr;
    for (auto & p : phases)
        if (p["phase"] == base && !p.contains("measured")) {
            entry = &p;
            break;
        }
    const auto dev = ddo::torch::AllocationMeter::read(device_->device());
    nlohmann::json measured = {{"engine_device_bytes", phase.engine_max.device},
                               {"engine_host_bytes", phase.engine_max.host},
                               {"torch_peak_bytes", dev.peak ? nlohmann::json(*dev.peak) : nlohmann::json(nullptr)},
                               {"torch_source", dev.source},
                               {"torch_at_begin_bytes", phase.torch_at_begin ? nlohmann::json(*phase.torch_at_begin) : nlohmann::json(nullptr)},
                               {"phase_instance", phase_name_}};
    std::optional<std::uint64_t> device_bytes, host_bytes = phase.engine_max.host;
    if (dev.peak) device_bytes = *dev.peak + phase.engine_max.device;
    else measured["reason"] = dev.reason;
    if (device_->cuda) {  // LibTorch's CPU tensors are host memory beside a CUDA device
        const auto cpu = ddo::torch::AllocationMeter::read(c10::Device(c10::kCPU));
        measured["torch_host_peak_bytes"] = cpu.peak ? nlohmann::json(*cpu.peak) : nlohmann::json(nullptr);
        if (cpu.peak) *host_bytes += *cpu.peak;
        else host_bytes.reset();
    }
    measured["device_bytes"] = device_bytes ? nlohmann::json(*device_bytes) : nlohmann::json(nullptr);
    measured["host_bytes"] = host_bytes ? nlohmann::json(*host_bytes) : nlohmann::json(nullptr);
    if (!entry) {
        // A phase the plugin states no memory model for: measured, with no forecast beside it (never a forecast of
        // 0), so that the report shows what the forecast leaves out (Note [Memory forecast]).
        forecast_json_["unstated"].push_back({{"phase", base}, {"measured", measured},
                                              {"reason", "the plugin states no memory model for this phase"}});
    } else if (phase.embeddings_kept) {  // the forecast is of the encoder running: nothing to compare
        (*entry)["measured"] = measured;
        (*entry)["ratio"] = {{"device", nullptr}, {"host", nullptr}};
        (*entry)["ratio_reason"] = "the server's embeddings cache held the prompt's embeddings: the encoder did not run";
    } else {
        (*entry)["measured"] = measured;
        for (const auto & w : compare_with_forecast(*entry, base, device_bytes, host_bytes)) {
            forecast_json_["warnings"].push_back(w);
            log(3, "memory forecast missed: " + w);
        }
    }
    if (auto * tr = ctx_.tracker) tr->set_forecast(forecast_json_);
}

}  // namespace ddo::model
