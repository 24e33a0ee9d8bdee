// ModelRun: the scaffolding of one model plugin run, so that a plugin holds only model math. It owns what every
// model needs and no model needs to know:
//   - the workload and the plugin's options, typed (Workload, option<T>), read from the resolved settings;
//   - the device (capacities.allocator_backend) and one ComponentPlan per component (route, capacities, VAE
//     strategy, allocator) with requested vs effective values recorded in the report;
//   - weight sources on the offload engine (open_weights) and their unload at a phase boundary with the
//     outstanding owners checked (unload);
//   - phases (load, encode, denoise, decode, write), per-step progress events, interruption checks, the torch
//     memory monitors;
//   - checkpoint and input identity (ddo/store/checkpoint_identity.hpp) and the outputs (write_images).
//
//   void run_my_model(ddo::model::ModelRun & run) {
//       const auto w = run.workload({.width = 1024, .height = 1024, .steps = 30});
//       run.begin_phase("load");
//       auto blocks = run.open_weights(run.plan("transformer"), run.component("transformer"), groups, w.dtype);
//       run.begin_phase("denoise");
//       for (int i = 0; i < w.steps; ++i) { run.check_interrupted("denoise"); ...; run.step(i + 1, w.steps); }
//       run.unload(std::move(blocks));
//       run.begin_phase("write");
//       run.write_images(pixels);
//   }
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ddo/model/component_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/condition_image.hpp"
#include "ddo/model/device_placement.hpp"
#include "ddo/model/lora_adapters.hpp"
#include "ddo/model/memory_forecast.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/model/tensor_output.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/run_context.hpp"
#include "ddo/store/component_source.hpp"
#include "ddo/util/path_lock.hpp"

namespace ddo {
class RunTracker;
}

namespace ddo::model {

class ModelSession;  // model_session.hpp

using LogFn = std::function<void(int level, const std::string & message)>;  // level: spdlog's (2 = info)

// The plugin's defaults for the common workload keys (workload.* in docs/presets.md).
struct WorkloadDefaults {
    std::int64_t width = 1024;
    std::int64_t height = 1024;
    int steps = 40;
    std::uint64_t seed = 0;
    std::int64_t frames = 1;  // video plugins: the clip's frames and frame rate
    double fps = 0;
};

// The common workload, resolved: workload.<key> (with --steps, --width, ... as its shorthands), else the plugin's
// default. What the plugin then changes (sizes floored to its multiple, guidance it cannot apply) it says with
// ModelRun::adjust.
struct Workload {
    std::int64_t width = 0, height = 0;
    bool width_set = false, height_set = false;  // set by a layer (else the plugin default; a plugin may derive them)
    std::int64_t frames = 1;               // workload.frames (--frames): a still-image plugin refuses it when set
    double fps = 0;                        // workload.fps (--fps)
    int steps = 0;
    bool steps_set = false;                // workload.steps was set by a layer (else `steps` is the plugin default)
    std::optional<std::vector<double>> sigmas;  // workload.sigmas: the sampling grid asked for (excluding the terminal)
    std::uint64_t seed = 0;
    int num_images = 1;                    // workload.num_images (--num-images): images per prompt
    std::optional<double> guidance_scale;  // workload.guidance_scale (--cfg-scale); unset = the plugin's default
    std::optional<std::string> prompt;           // workload.prompt (-p): a plugin without a text encoder refuses it
    std::optional<std::string> negative_prompt;  // workload.negative_prompt (-n)
    std::vector<std::string> images;       // workload.images (--image FILE[@FRAME]): read by condition_images
    std::optional<double> strength;        // workload.strength (--strength), in (0, 1]; unset = the plugin's default
    std::string precision;                 // bf16 | fp16 | fp32 (unset: bf16 on CUDA, fp32 on the CPU)
    at::ScalarType dtype = at::kFloat;     // the compute dtype for `precision`
};

class ModelRun {
public:
    // ctx and its settings/tracker are borrowed for the run. Throws UsageError without resolved settings.
    ModelRun(RunContext & ctx, std::string plugin_name, LogFn log);
    ~ModelRun();  // ends the open phase; records the counters of weights still open (failure, interrupt)
    ModelRun(const ModelRun &) = delete;
    ModelRun & operator=(const ModelRun &) = delete;

    const std::string & plugin_name() const noexcept { return plugin_; }
    bool dry_run() const noexcept { return ctx_.dry_run; }
    const std::filesystem::path & model_dir() const noexcept { return ctx_.model_dir; }
    // Where component `name`'s weights come from: model_dir()/name, or the file the user gave for it
    // (--transformer FILE; Note [Component files]) with that folder's config.json.
    store::ComponentSource component(const std::string & name) const;
    const std::filesystem::path & prompt_embeds() const noexcept { return ctx_.prompt_embeds; }
    // --latents FILE: the initial noise instead of the seeded draw (empty: none).
    const std::filesystem::path & latents_file() const noexcept { return ctx_.latents; }
    // `ddo-host encode`: encode the prompt and write the embeddings to output_file(), nothing else.
    bool encode_only() const noexcept { return ctx_.encode_only; }
    const std::filesystem::path & output_file() const noexcept { return ctx_.output_file; }
    bool overwrite() const noexcept { return ctx_.overwrite; }
    // --save-latents FILE / --decode-latents FILE (absolute; empty: not asked). A plugin that cannot honour them
    // refuses them (UsageError naming the flag).
    const std::filesystem::path & save_latents_file() const noexcept { return ctx_.save_latents; }
    const std::filesystem::path & decode_latents_file() const noexcept { return ctx_.decode_latents; }
    // The plugin honours --save-latents / --decode-latents: without this call (before workload()) workload() refuses them
    // (UsageError naming the flag and the plugin).
    void accept_latents_files() noexcept { latents_files_accepted_ = true; }
    // The plugin's denoising loop runs through step_cache(): without this call (before workload()) workload() refuses
    // a cache.kind other than off (UsageError naming the key and the plugin), so no plugin ignores it silently.
    void accept_step_cache() noexcept { step_cache_accepted_ = true; }
    RunTracker * tracker() const noexcept { return ctx_.tracker; }
    // The checkpoint directory, checked: UsageError (exit 2) naming --model when it was not given or is no directory.
    const std::filesystem::path & require_model_dir() const;
    // `relative` (model_index.json, transformer/config.json) names its diffusers class in "_class_name": one of
    // `expected`, or UsageError (exit 2, before any tensor is read) naming the file, the class found and the classes
    // this plugin takes. A missing file or key passes (older exports); the checkpoint's own checks follow.
    void check_class(const std::filesystem::path & relative, const std::vector<std::string> & expected) const;
    void log(int level, const std::string & message) const;

    // plugin.<plugin>.<key>: its value, or `fallback` when unset. UsageError naming the key and its source for a
    // value of the wrong type.
    template <class T> T option(const std::string & key, T fallback) const {
        std::string source;
        const nlohmann::json * v = option_value(key, &source);
        if (!v) return fallback;
        try {
            return v->get<T>();
        } catch (const std::exception & e) {
            throw_option_type(key, source, e.what());
        }
    }
    Workload workload(const WorkloadDefaults & defaults);
    // Where the prompt comes from, checked: true for text (workload.prompt, -p), false for a --prompt-embeds file
    // (or none: a dry run). UsageError for `ddo-host encode` without -p, for -p together with --prompt-embeds, and
    // for -n without -p (a file carries its own negative_prompt_embeds).
    bool prompt_from_text(const Workload & w) const;
    // A common key this model cannot honour (workload.frames for an image model): UsageError (exit 2) naming the
    // key, its source and `why` when any layer set it; a default value passes.
    void refuse_if_set(const std::string & key, const std::string & why) const;

    // Decided on first use: capacities.allocator_backend against the machine; attaches the torch memory monitors.
    const DevicePlacement & device();
    // The resolved plan of one component on this run's device.
    ComponentPlan plan(const std::string & component);
    // A component's weights on the engine (component_weights.hpp). Records the intended and executed route and
    // the plan's counters in the report under the component's name.
    std::unique_ptr<ComponentWeights> open_weights(const ComponentPlan & plan, const store::ComponentSource & source,
                                                   std::vector<GroupSpec> groups, at::ScalarType compute_dtype);
    // Note [Memory forecast] (docs/architecture.md). The weights of a component as `plan` would hold them, planned now
    // from the checkpoint's headers (nothing is read or allocated): the weights of the stages naming the component in
    // forecast_memory. Call it before anything loads, for every component a stage names.
    void forecast_weights(const ComponentPlan & plan, const store::ComponentSource & source, std::vector<GroupSpec> groups,
                          at::ScalarType compute_dtype);
    // Each stage of `model` at `asked`: its peaks held against the machine (--device-memory, --host-memory, --machine;
    // else this machine's available memory), recorded as the report's forecast and logged. When a phase does not fit:
    // UsageError (exit 2, before anything loads) naming the phase, its forecast and the budget, and the largest size
    // (sizes floored to `multiple`) and, for video (`frame_step` > 0), the most frames that fit. When each forecast
    // phase ends, its measured peak is recorded beside the forecast, with the ratio.
    void forecast_memory(const ForecastShape & asked, const StageModel & model, std::int64_t multiple,
                         std::int64_t frame_step = 0);
    // The machine the forecast is held against.
    MachineBudget machine_budget();
    // Note [Fitting a run] (docs/architecture.md). `plan_and_forecast` plans the run's components from the settings
    // (plan(), the VAE strategy) and calls forecast_weights and forecast_memory; the plugin's plans are what its last
    // call left. When a phase does not fit, fit.policy decides: `refuse` (exit 2 before anything loads, naming the
    // phase, the largest size and most frames that fit, and each setting of the fit ladder with its forecast),
    // `auto` (the ladder's settings up to the first that fits applied to this run's settings, each in the report's
    // adjustments; plan_and_forecast's last call was with them), `off` (run anyway, a warning in the forecast).
    // Returns true when settings were adjusted (the plugin records its workload again).
    bool fit(const std::function<void()> & plan_and_forecast);

    // Under `ddo-host serve` (RunContext::session) open_weights first asks the server's session for the weights a
    // previous run left loaded under the same key (the component, its files and their identity, the groups, route,
    // capacities, allocator, dtype and LoRA set); a hit resumes them: nothing is read, uploaded or converted again.
    // The report's counters.<component>.session says which, and why not (Note [Serving], "Weight reuse").
    // End of a component's phase: finishes the engine phase, records the counters and the phase it was unloaded
    // in, frees the weights (under serve: parks them in the session for the next run when the server keeps that
    // component). RuntimeError when owners are still outstanding (a lease or upload never returned).
    void unload(std::unique_ptr<ComponentWeights> weights);

    // Prompt embeddings kept between the runs of a server (Note [Serving]): what a text encoder (`encoder`, the
    // component) produced for `key` (everything the plugin's encoding reads besides the encoder's weights: the
    // prompts after the template, lengths, dtype, condition images), or nullopt (a miss; always outside serve, and
    // with the server's cache off). The kit adds the encoder's identity, files and LoRA set to the key. A hit begins
    // phase `phase` (the plugin's encode phase) noted embeddings_cache = "hit", which then has no step: the encoder
    // is not opened. The tensors are host copies, the plugin's to move to its device.
    std::optional<NamedTensors> kept_embeddings(const std::string & encoder, const nlohmann::json & key,
                                                const std::string & phase);
    // After a miss, in the phase that encoded them: keeps host copies of `tensors` under the same key (bounded) and
    // notes embeddings_cache = "miss" on the phase.
    void keep_embeddings(const std::string & encoder, const nlohmann::json & key, const NamedTensors & tensors);
    // A note on the open phase (the report's phases[].notes.<key>).
    void note_phase(const std::string & key, nlohmann::json value);

    // runtime.generation_repeats: generations per run on weights loaded once (warm comparisons).
    int generations() const;
    // Generation g (1-based) begins: phases of g > 1 are recorded as "<name> (generation g)", and write_images
    // compares its images with generation 1's instead of writing them again (notes.generations).
    void begin_generation(int g);
    int generation() const noexcept { return generation_; }

    // Phases: begin_phase ends the open one. Weights opened earlier begin their engine phase here.
    void begin_phase(const std::string & name);
    void end_phase();
    const std::string & phase() const noexcept { return phase_name_; }
    // cache.* (--cache KIND; Note [Step caching]) for a denoising loop of `steps` steps, checked before anything
    // loads: null when cache.kind = off; UsageError (exit 2) naming the key for a refused setting (a kind's key set
    // for another kind, mag without ratios, a schedule below cache.min_steps). With calibrate, the mag_ratios.toml
    // it will write beside the outputs is claimed now (exists without --overwrite: UsageError). The cache's records
    // of each pass go into the next step()'s report entry (steps[].cache), its summary into the report's step_cache.
    // Owned by the run; one per run (a second call returns the same cache, reset, for a new generation).
    StepCache * step_cache(int steps);
    // A later denoising stage of the same run (ltx2_video's stage 2; Note [Step caching], "Two-stage runs"), after
    // finish_step_cache() of the stage before it: a cache of the same settings with fresh state for this stage's
    // `steps`, its records in the steps of the open phase; null when the run has no cache, or when `steps` is below
    // cache.min_steps without cache.allow_few_steps (the stage runs without the cache and the report's
    // step_cache.stages[] says why: the first stage's schedule is the one the user chose, and only it is refused).
    StepCache * step_cache_stage(int steps);
    // A configuration of an accepting plugin that cannot run with the step cache (a two-stage run, say): UsageError
    // (exit 2) naming cache.kind and `why` when it is set to another kind than off.
    void refuse_step_cache(const std::string & why) const;
    // After the denoising loop: records the summary; a mag calibration writes mag_ratios.toml (a preset to inherit:
    // [cache] kind = "mag", mag_ratios = the first branch's ratios) and records it in the outputs.
    void finish_step_cache();
    // Step `step` of `total` of the open phase is done: report step time, log a line, progress event.
    void step(int step, int total);
    // Throws Error(interrupted) naming `where` when the host saw SIGINT.
    void check_interrupted(const std::string & where) const;
    // A decoder's callbacks: a stage check stops the run "while decoding (after <stage>)"; piece progress stops it
    // "while decoding <unit> <done> of <total>", returns the C heap's free pages (phase note host_heap_release; Note
    // [Host heap between pieces]) and reports the piece as a step of the open phase. The ModelRun must outlive them.
    std::function<void(const std::string & stage)> decode_stage_check() const;
    std::function<void(int done, int total)> decode_piece_progress(const std::string & unit);

    // The run does `effective` where `requested` was asked for `key`: recorded in the report's adjustments and
    // warned once on the console.
    void adjust(const std::string & key, const nlohmann::json & requested, const nlohmann::json & effective,
                const std::string & reason);

    // The report's workload object (what the run does, after the plugin's decisions).
    void record_workload(nlohmann::json workload);
    // The workload object last recorded (null before record_workload): what a latents file carries in its metadata.
    const nlohmann::json & recorded_workload() const noexcept { return workload_; }
    void record_route(const std::string & component, const std::string & intended, const std::string & executed,
                      const std::string & note = "");
    // The run does not use `component` of the plugin, and why (RunTracker::set_route_unused): every component a plugin
    // declares is either executed (open_weights, record_route) or not used with its reason in the report.
    void not_used(const std::string & component, const std::string & reason);
    // Every component of the plugin but `used` not used, for `reason` (`ddo-host encode`: the text path only).
    void not_used_except(const std::vector<std::string> & used, const std::string & reason);
    void record_counters(const std::string & component, nlohmann::json counters);
    // checkpoint: {"path", "identity": checkpoint_identity(model_dir, components), "hash_weights", "inputs", "loras"},
    // from the headers alone: call it before the checkpoint is validated, so a failed load still says what it read.
    // The LoRA files (lora.adapters) are opened and matched here against every component the run reads, before
    // anything is computed: UsageError (exit 2) for modules that adapt nothing (unless lora.allow_unmatched: then
    // warnings, checkpoint.lora_warnings), RuntimeError (exit 4) for a damaged file or a factor of the wrong shape.
    // `components` are every component the run reads: a file given for another one (--text-encoder FILE with
    // --prompt-embeds) is refused here, UsageError (exit 2) naming the flag.
    void record_checkpoint(const std::vector<std::string> & components);
    // A model's table of original names for `component` (LTX-2's: diffusers' converter), tried for a LoRA key that
    // names nothing as spelled (Note [Applying LoRA]). Call it before record_checkpoint.
    void set_original_names(const std::string & component, std::vector<std::pair<std::string, std::string>> renames);
    // The LoRA factors adapting `component` in `dtype` on the run's device (read once, shared with the component's
    // weights from open_weights), or null when no LoRA adapts it. For weights a plugin holds outside the engine
    // (resident globals): their Linear modules take them (GroupTensors does this for the engine's groups).
    std::shared_ptr<ComponentLora> lora(const std::string & component, at::ScalarType dtype);
    // Model facts added under checkpoint.facts (block counts, payloads) once the plugin has read them.
    void add_checkpoint_facts(const nlohmann::json & facts);
    // inputs.<role>: {"file", "size", "sha256"}.
    void record_input(const std::string & role, const std::filesystem::path & file);
    // workload.images (--image FILE[@FRAME]), each parsed, its file identified (inputs.image_<i>: file, size, sha256,
    // frame; recorded before decoding, so a refused file is in the report) and decoded by media::read_image
    // (UsageError, exit 2, naming the file: no image, a video, truncated, 0x0, over `limits`); then the decoded facts
    // are added (format, source_width/height, bit_depth, source_channels, source_color, has_alpha, orientation).
    // A relative path in a preset file is relative to that file. Empty when the key is unset.
    std::vector<ConditionImage> condition_images(const media::ImageLimits & limits = {});
    // What the plugin did to condition image `index` (resize mode, filter, effective size, crf), merged into
    // inputs.image_<index>.preprocess.
    void record_image_preprocess(std::size_t index, const nlohmann::json & preprocess);

    // The files write_images will write for `count` images, checked now (before anything loads): UsageError (exit 2)
    // when one exists without --overwrite, is the report itself, or another run is writing it (PathLock). -o/--output-file names the first; otherwise
    // <output>/<stem>.png (count 1) or <stem>_<i>.png.
    std::vector<std::filesystem::path> plan_images(int count, const std::string & stem = "image");
    // [B, C, H, W] in [0, 1] with C = 1..4 -> the planned files (plan_images(B, stem) when not planned), 8-bit, text
    // chunks naming the plugin, preset, report and settings; each file is hashed into the report's outputs.
    std::vector<std::filesystem::path> write_images(const at::Tensor & images, const std::string & stem = "image");

    // Outputs of other kinds (video.mp4 + audio.wav), checked now as plan_images checks images: `names` are file
    // names in the output directory; with -o/--output-file the first is that file and the others take its stem with
    // their own extension (-o clip.mp4 -> clip.mp4, clip.wav).
    // With -o a frame pattern (frame_pattern()), the names stay in the output directory (the pattern's).
    std::vector<std::filesystem::path> plan_outputs(const std::vector<std::string> & names);
    // -o/--output-file is a printf pattern of frame files (frames/%05d.png: one %d conversion, optionally with
    // zero padding and a width, a .png name; %% for a literal %): UsageError naming -o for a malformed one.
    bool frame_pattern() const;
    // The files of `count` lossless frames (frame i, 0-based, the clip's frame index), checked now as plan_outputs
    // checks its files (and claimed beside them: planning other outputs keeps the claim): -o's pattern, else
    // `beside`'s stem + "_%05d.png" in its directory (video.mp4 -> video_00000.png ...).
    std::vector<std::filesystem::path> plan_frame_files(std::int64_t count, const std::filesystem::path & beside);
    // A planned output the plugin wrote (atomically; sha256 of exactly the bytes written), with its facts (codecs,
    // frames, duration), recorded in the report's outputs.
    void record_output(const std::filesystem::path & path, const std::string & media_type, std::uint64_t bytes,
                       const std::string & sha256, nlohmann::json facts = nullptr);

    // -o/--output-file as a tensor file (`ddo-host encode`), checked now as plan_images checks images: UsageError
    // when it is unset, exists without --overwrite, is the report, or another run is writing it.
    std::filesystem::path plan_tensor_file();
    // --save-latents FILE, checked now as plan_outputs checks its files and locked beside them (a claim of its own:
    // planning the other outputs later keeps it). Returns the path; UsageError when --save-latents was not given.
    std::filesystem::path plan_latents_file();
    // The planned latents file written atomically (safetensors, tensor_output.hpp) and recorded in outputs
    // (application/x-safetensors, with `facts`).
    std::filesystem::path write_latents_file(const std::vector<std::pair<std::string, at::Tensor>> & tensors,
                                             const std::map<std::string, std::string> & metadata,
                                             nlohmann::json facts = nullptr);
    // What record_checkpoint recorded for `component` (checkpoint.identity.components.<component>), or null.
    nlohmann::json component_identity(const std::string & component) const;
    // Writes the planned tensor file atomically (safetensors, tensor_output.hpp) and records it in outputs.
    std::filesystem::path write_tensors(const std::vector<std::pair<std::string, at::Tensor>> & tensors,
                                        const std::map<std::string, std::string> & metadata);

private:
    const nlohmann::json * option_value(const std::string & key, std::string * source) const;
    // Every path: not the report, not existing without --overwrite (UsageError naming `flag`), its directory made,
    // locked against another run (PathLock); they become the planned outputs.
    void claim_outputs(const std::vector<std::filesystem::path> & paths, const std::string & flag);
    void signal_at_phase_for_tests(const std::string & phase) const;
    [[noreturn]] void throw_option_type(const std::string & key, const std::string & source, const char * what) const;
    struct PhaseState;

    RunContext & ctx_;
    std::string plugin_;
    LogFn log_;
    std::optional<DevicePlacement> device_;
    std::vector<ComponentWeights *> open_;  // borrowed: owned by the plugin until unload()
    std::unique_ptr<PhaseState> phase_;
    std::string phase_name_;
    int generation_ = 1;
    std::vector<std::string> first_images_;  // XXH3 of generation 1's pixels, per image
    nlohmann::json generation_notes_ = nlohmann::json::array();
    nlohmann::json inputs_ = nlohmann::json::object();
    std::vector<std::filesystem::path> planned_outputs_;  // images (plan_images) or the tensor file (plan_tensor_file)
    std::vector<PathLock> output_locks_;  // this run's claim on its output paths (released with the run)
    std::filesystem::path latents_out_;   // plan_latents_file's path
    PathLock latents_lock_;               // its claim
    bool latents_files_accepted_ = false;
    bool step_cache_accepted_ = false;
    std::vector<PathLock> frame_locks_;   // plan_frame_files' claim
    std::unique_ptr<StepCache> step_cache_;  // the current stage's (step_cache_stage replaces it)
    nlohmann::json step_cache_report(nlohmann::json current) const;  // the report's step_cache, current: this stage's
    StepCache * active_step_cache_ = nullptr;  // the stage's cache whose records step() takes (null: an uncached stage)
    bool step_cache_stage_open_ = false;  // the active stage's loop has not been finished (finish_step_cache)
    nlohmann::json step_cache_stages_ = nlohmann::json::array();  // per stage: phase, steps, cached, summary or reason
    nlohmann::json step_cache_first_;  // the first stage's summary (the report's step_cache, stages[] beside it)
    std::filesystem::path calibration_file_;  // mag calibration's mag_ratios.toml (empty: none)
    PathLock calibration_lock_;
    nlohmann::json workload_;
    // Note [Memory forecast]: the weights planned for it, the report's forecast, the phases measured so far.
    std::unique_ptr<MemoryForecast> forecast_;
    nlohmann::json forecast_json_;
    void measure_phase(PhaseState & phase);
    // The last forecast_memory: its phases, the first that does not fit, and how to search what would.
    struct ForecastOutcome {
        std::vector<PhaseForecast> phases;
        std::optional<MemoryForecast::Excess> excess;
        ForecastShape asked;
        StageModel model;
        std::int64_t multiple = 1, frame_step = 0;
    };
    std::optional<ForecastOutcome> forecast_outcome_;
    bool fitting_ = false;    // inside fit(): forecast_memory records, fit decides
    bool fit_trial_ = false;  // evaluating a rung of the fit ladder: nothing logged
    // The run's settings once fit.policy = auto changed some (null: the host's, as resolved).
    std::unique_ptr<ResolvedSettings> fitted_settings_;
    const ResolvedSettings & settings() const { return fitted_settings_ ? *fitted_settings_ : *ctx_.settings; }
    [[noreturn]] void refuse_forecast(const nlohmann::json & tried);
    nlohmann::json checkpoint_ = nlohmann::json::object();
    LoraAdapters loras_;
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> original_names_;
    std::map<std::string, std::shared_ptr<ComponentLora>> lora_loaded_;  // component -> factors (null: none)
    void open_loras(const std::vector<std::string> & components);
    // Serve's session (null in a CLI run), the key of each component's weights opened under it, their report block.
    ModelSession * session_ = nullptr;
    std::map<const ComponentWeights *, std::string> session_keys_;
    std::map<std::string, nlohmann::json> session_notes_;
    std::string weights_key(const ComponentPlan & plan, const store::ComponentSource & source,
                            const std::vector<GroupSpec> & groups, at::ScalarType dtype) const;
    std::string embeddings_key(const std::string & encoder, const nlohmann::json & key) const;
};

}  // namespace ddo::model
