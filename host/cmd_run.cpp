// The run form: ddo-host --plugin NAME --preset FILE_OR_NAME [--set k=v]... [--dry-run] ...
// Resolves the preset, loads the verified model plugin, fills a RunContext, calls vtable->run and
// always writes the report (also on failure and SIGINT). Exit codes: 0 ok, 2 usage/config,
// 3 verification, 4 runtime, 130 interrupted (README, "Exit codes").
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <unistd.h>
#include <iostream>

#include "command_registry.hpp"
#include "machine_spec.hpp"
#include "ddo/store/diffusers_checkpoint.hpp"
#include "model_table.hpp"
#include "run_command.hpp"
#include "run_console.hpp"
#include "run_signals.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/linux_admission.hpp"
#include "ddo/plugin/plugin_host_api.hpp"
#include "ddo/plugin/plugin_registry.hpp"
#include "ddo/plugin/plugin_search_path.hpp"
#include "ddo/preset/preset_resolver.hpp"
#include "ddo/preset/preset_schema.hpp"
#include "ddo/report/run_journal.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/run_context.hpp"
#include "ddo/util/path_lock.hpp"
#include "ddo/util/status_name.hpp"
#include "ddo/util/utf8_text.hpp"

namespace ddo::host {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The flag a run polls: the caller's (RunHooks::interrupted), else the process's (run_signals.hpp: SIGINT, SIGTERM,
// SIGHUP).
std::atomic<bool> & interrupt_flag(const RunHooks & hooks) { return hooks.interrupted ? *hooks.interrupted : run_interrupted(); }

// "interrupted by SIGTERM" and its exit code (128 + signal), or what the caller says interrupted (ddo-host serve).
std::string interrupted_by(const RunHooks & hooks) {
    if (hooks.interruption) return hooks.interruption().first;
    return std::string("interrupted by ") + signal_name(interrupting_signal());
}
int interrupted_code(const RunHooks & hooks) {
    if (hooks.interruption) return hooks.interruption().second;
    return interrupting_signal() ? 128 + interrupting_signal() : int(ExitCode::interrupted);
}

// A --set value that stays the text given: the resolver strips one pair of surrounding quotes, so wrap it in one.
std::string quoted(const std::string & s) { return "\"" + s + "\""; }

// --seed -1: a random seed, drawn here so that the report can record it (and the run be repeated).
std::uint64_t random_seed() {
    std::random_device rd;
    return ((std::uint64_t(rd()) << 32) | rd()) & ((1ull << 53) - 1);  // workload.seed is at most 2^53 - 1
}

// Command-line text must be UTF-8 (it goes into the report's JSON and into presets' string values), checked before
// anything is resolved.
void require_utf8(const std::string & text, const std::string & what) {
    if (first_invalid_utf8(text))
        throw UsageError(what + " is not valid UTF-8; pass UTF-8 text (check the terminal's or the script's encoding)");
}

void require_utf8(const RunArgs & a) {
    for (const auto & s : a.sets) require_utf8(s, "--set " + s.substr(0, s.find('=')));
    for (const auto & l : a.loras) require_utf8(l, "--lora");
    for (const auto & i : a.images) require_utf8(i, "--image");
    if (a.prompt) require_utf8(*a.prompt, "--prompt");
    if (a.negative_prompt) require_utf8(*a.negative_prompt, "--negative-prompt");
    for (const auto & [v, flag] : {std::pair{a.preset, "--preset"}, {a.model, "--model"}, {a.prompt_embeds, "--prompt-embeds"},
                                   {a.latents, "--latents"}, {a.output, "--output"}, {a.output_file, "--output-file"}, {a.report, "--report"},
                                   {a.save_latents, "--save-latents"}, {a.decode_latents, "--decode-latents"},
                                   {a.transformer, "--transformer"}, {a.text_encoder, "--text-encoder"}})
        require_utf8(v, flag);
}

// --steps N etc. are shorthand for --set workload.steps=N (so they carry provenance "--set").
std::vector<std::string> all_sets(const RunArgs & a, std::optional<std::uint64_t> drawn_seed) {
    std::vector<std::string> sets = a.sets;
    // A shorthand and a --set of the same key: which one the user meant is unknowable (the command line's order
    // between different options is not kept), so both is a usage error.
    const std::pair<bool, const char *> shorthands[] = {
        {bool(a.steps), "workload.steps"},           {bool(a.width), "workload.width"},
        {bool(a.height), "workload.height"},         {bool(a.seed), "workload.seed"},
        {bool(a.cfg_scale), "workload.guidance_scale"}, {bool(a.prompt), "workload.prompt"},
        {bool(a.negative_prompt), "workload.negative_prompt"}, {bool(a.num_images), "workload.num_images"},
        {bool(a.frames), "workload.frames"},         {bool(a.fps), "workload.fps"},
        {!a.loras.empty(), "lora.adapters"},          {a.lora_allow_unmatched, "lora.allow_unmatched"},
        {!a.images.empty(), "workload.images"},       {bool(a.strength), "workload.strength"},
        {bool(a.cache), "cache.kind"},               {bool(a.fit), "fit.policy"}};
    for (const auto & [given, key] : shorthands)
        if (given)
            for (const auto & s : a.sets)
                if (s.starts_with(std::string(key) + "="))
                    throw UsageError(std::string("both a shorthand flag and --set ") + key + " were given; give one of them");
    if (a.steps) sets.push_back("workload.steps=" + std::to_string(*a.steps));
    if (a.width) sets.push_back("workload.width=" + std::to_string(*a.width));
    if (a.height) sets.push_back("workload.height=" + std::to_string(*a.height));
    if (drawn_seed) sets.push_back("workload.seed=" + std::to_string(*drawn_seed));
    else if (a.seed) sets.push_back("workload.seed=" + std::to_string(*a.seed));
    if (a.cfg_scale) sets.push_back("workload.guidance_scale=" + std::to_string(*a.cfg_scale));
    if (a.num_images) sets.push_back("workload.num_images=" + std::to_string(*a.num_images));
    if (a.frames) sets.push_back("workload.frames=" + std::to_string(*a.frames));
    if (a.fps) {
        std::ostringstream v;
        v.precision(17);
        v << *a.fps;
        sets.push_back("workload.fps=" + v.str());
    }
    if (a.prompt) sets.push_back("workload.prompt=" + quoted(*a.prompt));
    if (a.negative_prompt) sets.push_back("workload.negative_prompt=" + quoted(*a.negative_prompt));
    if (!a.loras.empty()) sets.push_back("lora.adapters=" + nlohmann::json(a.loras).dump());
    if (a.lora_allow_unmatched) sets.push_back("lora.allow_unmatched=true");
    if (!a.images.empty()) sets.push_back("workload.images=" + nlohmann::json(a.images).dump());
    if (a.cache) sets.push_back("cache.kind=" + quoted(*a.cache));
    if (a.fit) sets.push_back("fit.policy=" + quoted(*a.fit));
    if (a.strength) {
        std::ostringstream v;
        v.precision(17);
        v << *a.strength;
        sets.push_back("workload.strength=" + v.str());
    }
    return sets;
}

// Writable: make the directory and a probe file in it, now, not after denoising.
void probe_dir(const fs::path & dir, const std::string & flag) {
    std::error_code ec;
    const fs::path d = dir.empty() ? fs::current_path() : dir;
    fs::create_directories(d, ec);
    const fs::path probe = d / (".ddo_write_probe_" + std::to_string(::getpid()));
    std::ofstream f(probe);
    const bool ok = f.good();
    f.close();
    fs::remove(probe, ec);
    if (!ok) throw UsageError(flag + " " + d.string() + " is not writable; choose another directory");
}

fs::path canonical_of(const fs::path & p) { return fs::weakly_canonical(fs::absolute(p)); }

// The report path, before anything loads (exit 2): not existing unless --overwrite, not a directory, writable.
void check_report_path(const RunArgs & a, const fs::path & report_path) {
    if (fs::is_directory(report_path))
        throw UsageError("--report " + report_path.string() + " is a directory; give a file name");
    if (fs::exists(report_path) && !a.overwrite)
        throw UsageError("report " + report_path.string() + " exists; pass --overwrite to replace it, or choose another "
                         "--report");
    probe_dir(report_path.parent_path(), "--report");
}

// Input files named on the command line exist (exit 2 naming the flag), before anything loads.
void check_input_paths(const RunArgs & a) {
    for (const auto & [v, flag] : {std::pair{a.prompt_embeds, "--prompt-embeds"}, {a.latents, "--latents"},
                                   {a.decode_latents, "--decode-latents"}})
        if (!v.empty() && !fs::is_regular_file(v))
            throw UsageError(std::string(flag) + " " + v + (fs::exists(v) ? " is not a regular file" : " does not exist") +
                             "; give a safetensors file");
}

// The output paths, before anything loads (exit 2): distinct from the report, writable. The files a plugin writes
// are checked by the model kit (ModelRun::plan_images) once it knows their names.
void check_output_paths(const RunArgs & a, const fs::path & report_path) {
    if (!a.save_latents.empty()) {
        if (canonical_of(a.save_latents) == canonical_of(report_path))
            throw UsageError("--save-latents and --report are the same file (" + report_path.string() +
                             "); the report would overwrite the latents");
        if (fs::is_directory(a.save_latents))
            throw UsageError("--save-latents " + a.save_latents + " is a directory; give a file name (latents.safetensors)");
        if (!a.decode_latents.empty() && canonical_of(a.save_latents) == canonical_of(a.decode_latents))
            throw UsageError("--save-latents and --decode-latents are the same file (" + a.save_latents +
                             "); a decode-only run reads it, it writes no latents");
        probe_dir(fs::path(a.save_latents).parent_path(), "--save-latents");
    }
    if (!a.output_file.empty()) {
        if (canonical_of(a.output_file) == canonical_of(report_path))
            throw UsageError("--output-file and --report are the same file (" + report_path.string() +
                             "); the report would overwrite the image");
        if (fs::is_directory(a.output_file))
            throw UsageError("--output-file " + a.output_file + " is a directory; give a file name (or use --output DIR)");
        probe_dir(fs::path(a.output_file).parent_path(), "--output-file");
        return;
    }
    if (!a.output.empty() && fs::exists(a.output) && !fs::is_directory(a.output))
        throw UsageError("--output " + a.output + " exists and is not a directory");
    probe_dir(a.output, "--output");
}

json workload_of(const ResolvedSettings & s) {
    json w = json::object();
    for (const auto & [k, v] : s.values())
        if (k.starts_with("workload.")) w[k.substr(9)] = v.value;
    return w;
}

// model_index.json names the checkpoint's pipeline: one the plugin takes, or exit 2 before the run, naming the
// installed plugin that takes it (loading only verified model plugins to ask).
void check_pipeline_class(const fs::path & model, const LoadedPlugin & plugin, PluginRegistry & registry) {
    const auto takes = pipeline_classes(plugin.model);
    if (takes.empty() || model.empty() || !fs::exists(model / "model_index.json")) return;
    std::string found;
    try {
        found = store::DiffusersCheckpoint::open(model).pipeline_class();
    } catch (const RuntimeError &) {  // a malformed model_index.json: the plugin's own checks name the problem
        return;
    }
    if (found.empty()) return;
    if (std::find(takes.begin(), takes.end(), found) != takes.end()) return;
    std::string other;
    std::vector<std::string> names;
    for (const auto & r : registry.records())
        if (r.kind == "model" && r.status != PluginStatus::refused && r.name != plugin.record.name) names.push_back(r.name);
    for (const auto & n : names) {
        try {
            const auto t = pipeline_classes(registry.load(n, "model").model);
            if (std::find(t.begin(), t.end(), found) != t.end()) other = n;
        } catch (const std::exception &) {
        }
        if (!other.empty()) break;
    }
    std::string list;
    for (const auto & t : takes) list += (list.empty() ? "" : ", ") + t;
    throw UsageError((model / "model_index.json").string() + ": this is a " + found + " checkpoint; plugin '" +
                     plugin.record.name + "' takes " + list + ". " +
                     (other.empty() ? "No installed plugin takes " + found + " (ddo-host plugins lists what each takes)"
                                    : "Plugin '" + other + "' takes it: run with --plugin " + other));
}

// run_once's steps, in order (each throws the Error whose exit code and message the report records).

// The report path: --report, else beside --output or --output-file, else ./ddo_report.json.
fs::path report_path_of(const RunArgs & a) {
    return !a.report.empty()        ? fs::path(a.report)
           : !a.output.empty()      ? fs::path(a.output) / "ddo_report.json"
           : !a.output_file.empty() ? fs::path(a.output_file).parent_path() / "ddo_report.json"
                                    : fs::path("ddo_report.json");
}

// The report path checked and locked, and the run journal beside it started. Throws UsageError when the report
// cannot be written there (the caller then writes it to a temp file); report_lock holds the lock from the moment it
// is taken, a refused journal included.
void claim_report(const RunArgs & a, const fs::path & report_path, RunTracker & tracker, PathLock & report_lock) {
    check_report_path(a, report_path);
    report_lock = PathLock::acquire(report_path, "report");
    // A journal beside the report is what a run that died (SIGKILL, the OOM killer) left: its only record.
    const fs::path journal = RunJournal::path_for(report_path);
    if (fs::exists(journal) && !a.overwrite)
        throw UsageError("run journal " + journal.string() + " is there: an earlier run on this report did not "
                         "finish. Read it with `ddo-host report summarize " + report_path.string() +
                         "`, then remove it or pass --overwrite");
    tracker.start_journal(journal);
}

// --seed -1: the seed drawn (recorded as an adjustment); nullopt for any other seed. Throws for a seed below -1.
std::optional<std::uint64_t> draw_seed(const RunArgs & a, RunTracker & tracker) {
    if (a.seed && *a.seed == -1) {
        const std::uint64_t drawn = random_seed();
        tracker.add_adjustment("workload.seed", -1, drawn, "--seed -1: a random seed, recorded to repeat the run");
        spdlog::info("seed {} (random; --seed {} repeats this run)", drawn, drawn);
        return drawn;
    }
    if (a.seed && *a.seed < 0) throw UsageError("--seed " + std::to_string(*a.seed) + ": a seed is >= 0, or -1 for a random one");
    return std::nullopt;
}

void record_plugin(RunTracker & tracker, const PluginRecord & rec) {
    tracker.set_plugin({{"name", rec.name},
                        {"version", rec.version},
                        {"file", rec.artifact.path.string()},
                        {"sha256", rec.actual_sha256},
                        {"xxh3_128", rec.xxh3_128},
                        {"fingerprint", rec.fingerprint},
                        {"abi", std::to_string(rec.abi_major) + "." + std::to_string(rec.abi_minor)},
                        {"sealed_copy", rec.sealed},
                        {"sealed_copy_reason", rec.sealed ? nlohmann::json(nullptr) : nlohmann::json(rec.seal_reason)},
                        {"sealed_copy_s", rec.seal_s}});
    tracker.add_artifact("model_plugin", rec.name, rec.artifact.path, rec.actual_sha256);
}

// The settings again with the plugin: its components and supported_options (plugin-specific keys), and every plugin
// name found (a plugin.<name> table must name one of them). Records them and the intended routes.
ResolvedSettings resolve_with_plugin(ResolveRequest & rq, const LoadedPlugin & plugin, const PluginRegistry & registry, RunTracker & tracker) {
    std::vector<std::string> known;
    for (const auto & r : registry.records())
        for (const auto & n : {r.artifact.name, r.name})
            if (!n.empty() && std::find(known.begin(), known.end(), n) == known.end()) known.push_back(n);
    rq.known_plugins = known;
    rq.plugin_name = plugin.record.name;
    rq.plugin_components = c_list(plugin.model->components);
    rq.supported_options = c_list(plugin.model->supported_options);
    ResolvedSettings settings = resolve_settings(rq);
    tracker.set_settings(settings);
    tracker.set_workload(workload_of(settings));
    for (const auto & c : settings.components()) {
        const auto & rv = settings.at("components." + c + ".route");
        tracker.set_route_intended(c, rv.value.get<std::string>(), rv.provenance.to_string());
    }
    return settings;
}

// The command line's part of the RunContext the plugin runs with.
void fill_run_context(RunContext & ctx, const RunArgs & a, const ResolvedSettings & settings, RunTracker & tracker,
                      const fs::path & report_path, RunConsole & console, const RunHooks & hooks) {
    ctx.settings = &settings;
    ctx.tracker = &tracker;
    ctx.model_dir = a.model;
    ctx.output_dir = a.output.empty() ? fs::current_path() : fs::path(a.output);
    if (!a.output_file.empty()) {
        ctx.output_file = fs::absolute(a.output_file);
        ctx.output_dir = ctx.output_file.parent_path();
    }
    ctx.overwrite = a.overwrite;
    ctx.prompt_embeds = a.prompt_embeds;
    ctx.latents = a.latents;
    if (!a.save_latents.empty()) ctx.save_latents = fs::absolute(a.save_latents);
    if (!a.decode_latents.empty()) ctx.decode_latents = fs::absolute(a.decode_latents);
    if (!a.transformer.empty()) ctx.component_files["transformer"] = a.transformer;
    if (!a.text_encoder.empty()) ctx.component_files["text_encoder"] = a.text_encoder;
    ctx.encode_only = a.encode_only;
    ctx.interrupted = &interrupt_flag(hooks);
    ctx.dry_run = a.dry_run;
    ctx.report_path = report_path;
    ctx.hash_weights = a.hash_weights;
    ctx.session = hooks.session;
    // Progress events of the kit (phase begun, step done): the console display of a run (run_console.hpp).
    // A caller's hook (ddo-host serve: the job's events) sees them too.
    ctx.progress = [&console, &hooks](const ProgressEvent & e) {
        console.on_progress(e);
        if (hooks.progress) hooks.progress(e);
    };
}

// The allocator the offload engine runs on: capacities.allocator ("auto" = linear), verified and recorded; one that
// cannot be loaded is ctx.allocator_error (the plugin decides), not a failure here.
void load_allocator(RunContext & ctx, const ResolvedSettings & settings, PluginRegistry & registry, RunTracker & tracker) {
    std::string name = settings.capacities("transformer").allocator;
    if (name.empty() || name == "auto") name = "linear";
    ctx.allocator_name = name;
    try {
        const LoadedPlugin & alloc = registry.load(name, "allocator");
        ctx.allocator_vtable = alloc.allocator;
        ctx.allocator_name = alloc.record.name;
        tracker.add_artifact("allocator_plugin", alloc.record.name, alloc.record.artifact.path, alloc.record.actual_sha256);
    } catch (const std::exception & e) {
        ctx.allocator_error = "allocator plugin '" + name + "' (capacities.allocator) could not be loaded: " + e.what();
        spdlog::warn("{}", ctx.allocator_error);
    }
}

// vtable->run in its phase; a status other than OK (or a signal) becomes the Error naming the plugin's own words
// (host->set_error: the file/tensor and the next step, or where it stopped).
void run_plugin(const LoadedPlugin & plugin, RunContext & ctx, RunTracker & tracker, bool dry_run, const RunHooks & hooks) {
    const std::atomic<bool> & interrupted = interrupt_flag(hooks);
    ddo_status st;
    if (plugin.host) plugin.host->clear_error();
    {
        auto run_phase = tracker.phase(dry_run ? "plugin_run (dry run)" : "plugin_run");
        st = plugin.model->run(ctx.to_c());
    }
    const std::string & name = plugin.record.name;
    const std::string detail = plugin.host ? plugin.host->last_error() : std::string();
    if (st == DDO_STATUS_INTERRUPTED || (interrupted.load() && st != DDO_STATUS_OK))
        throw Error(ExitCode::interrupted, interrupted_by(hooks) + " during the run" + (detail.empty() ? "" : ": " + detail));
    const std::string said = detail.empty() ? " (the plugin gave no message; see the log above)" : ": " + detail;
    if (st == DDO_STATUS_INVALID_ARGUMENT || st == DDO_STATUS_UNSUPPORTED)
        throw UsageError("plugin '" + name + "' refused the run (" + status_name(st) + ")" + said + "; check the preset and options");
    if (st != DDO_STATUS_OK) throw RuntimeError("plugin '" + name + "' run failed (" + status_name(st) + ")" + said);
    if (interrupted.load()) throw Error(ExitCode::interrupted, interrupted_by(hooks));
}

// The setup phase and the run: everything from the report's lock to tracker.mark_completed. report_lock is held until
// the caller has written the report; report_writable turns false when the report path is refused.
void setup_and_run(const RunArgs & a, const HostOptions & options, const fs::path & report_path, RunTracker & tracker,
                   RunConsole & console, PathLock & report_lock, bool & report_writable, const RunHooks & hooks) {
    auto setup = tracker.phase("setup");
    try {
        claim_report(a, report_path, tracker, report_lock);
    } catch (const UsageError &) {
        // A report that cannot be written where asked (or must not overwrite an existing one) goes to a temp file.
        report_writable = false;
        throw;
    }
    check_output_paths(a, report_path);
    check_input_paths(a);
    require_utf8(a);
    // The machine the memory forecast is held against: a bad profile or size is exit 2 before anything loads.
    const MachineSpec machine = resolve_machine(a.machine, a.device_memory, a.host_memory, options.preset_dir / "machines");
    const std::optional<std::uint64_t> drawn_seed = draw_seed(a, tracker);
    ResolveRequest rq;
    rq.preset = a.preset;
    rq.preset_dirs = {options.preset_dir};
    rq.sets = all_sets(a, drawn_seed);
    rq.environment = current_environment();
    // First without the plugin: preset errors are exit 2 before any artifact is touched.
    ResolvedSettings settings = resolve_settings(rq);
    tracker.set_settings(settings);
    tracker.set_sampling(std::chrono::milliseconds(settings.get_optional<long long>("telemetry.sample_interval_ms").value_or(100)),
                         settings.get_optional<double>("telemetry.cpu_budget_percent").value_or(1.0) / 100.0);
    tracker.set_workload(workload_of(settings));

    std::optional<PluginRegistry> own_registry;
    PluginRegistry & registry = hooks.registry ? *hooks.registry
                                               : own_registry.emplace(PluginRegistry::discover(
                                                     plugin_search_dirs(options.builtin_plugin_dir, options.plugin_dirs)));
    const LoadedPlugin & plugin = registry.load(a.plugin, "model");
    record_plugin(tracker, plugin.record);
    if (!plugin.model) throw RuntimeError("plugin '" + a.plugin + "' returned no model vtable");
    settings = resolve_with_plugin(rq, plugin, registry, tracker);
    if (!a.model.empty()) tracker.set_checkpoint({{"path", fs::absolute(a.model).string()}});
    check_pipeline_class(a.model, plugin, registry);
    setup.end();

    if (interrupt_flag(hooks).load())
        throw Error(ExitCode::interrupted, interrupted_by(hooks) + " before the run started");
    RunContext ctx;
    fill_run_context(ctx, a, settings, tracker, report_path, console, hooks);
    ctx.machine = machine;
    load_allocator(ctx, settings, registry, tracker);
    run_plugin(plugin, ctx, tracker, a.dry_run, hooks);
    tracker.mark_completed();
}

// A failed run recorded in the report; returns its exit code.
int record_failure(RunTracker & tracker, const Error & e, const RunHooks & hooks) {
    const int code = e.code() == ExitCode::interrupted ? interrupted_code(hooks) : static_cast<int>(e.code());
    if (e.code() == ExitCode::interrupted)
        tracker.mark_interrupted(e.what(), code);
    else
        tracker.mark_failed(code, e.what(), e.code() == ExitCode::usage          ? "usage"
                                            : e.code() == ExitCode::verification ? "verification"
                                                                                 : "runtime");
    spdlog::error("{}", e.what());
    return code;
}

// The report is always written: where asked, or (when that path is taken or not writable) beside it in the temp
// directory, and the console says where. Returns the exit code (runtime when the report cannot be written).
int write_report(RunTracker & tracker, RunConsole & console, const fs::path & report_path, bool report_writable, int code) {
    fs::path written = report_path;
    if (!report_writable) written = fs::temp_directory_path() / ("ddo_report_" + std::to_string(::getpid()) + ".json");
    try {
        tracker.write(written);
        if (code != 0) spdlog::warn("report: {}", written.string());  // also under -q: where the failure is recorded
        else spdlog::debug("report: {}", written.string());
        console.finish(code, written.string());
    } catch (const std::exception & e) {
        spdlog::error("{}", e.what());
        if (code == 0) code = static_cast<int>(ExitCode::runtime);
    }
    return code;
}

}  // namespace

int run_once(const RunArgs & a, const HostOptions & options, const std::vector<std::string> & argv) {
    return run_once(a, options, argv, RunHooks{});
}

int run_once(const RunArgs & a, const HostOptions & options, const std::vector<std::string> & argv, const RunHooks & hooks) {
    const fs::path report_path = report_path_of(a);
    RunTrackerOptions topt;
    topt.report_path = report_path;
    RunTracker tracker(topt);
    tracker.set_command_line(argv);
    tracker.set_dry_run(a.dry_run);
    // What the kernel would let this run grow into, before anything grows (seed 002; an unknown
    // observation is recorded as such, never as 0).
    tracker.set_admission(platform::LinuxAdmission().observe().to_json());
    // A second signal ends the process at once: the report is written first, from the watcher thread.
    set_second_signal_flush([&tracker, report_path](int signo) {
        tracker.mark_interrupted(std::string("interrupted by a second ") + signal_name(signo) + ": ended at once",
                                 128 + signo);
        tracker.write(report_path);
    });
    struct ClearFlush {
        ~ClearFlush() { set_second_signal_flush({}); }
    } clear_flush;
    RunConsole console(tracker, hooks.console && spdlog::get_level() <= spdlog::level::info, ::isatty(STDERR_FILENO) == 1);

    int code = 0;
    bool report_writable = true;
    PathLock report_lock;  // released after the report is written (declared first: destroyed last)
    try {
        setup_and_run(a, options, report_path, tracker, console, report_lock, report_writable, hooks);
    } catch (const Error & e) {
        code = record_failure(tracker, e, hooks);
    } catch (const std::exception & e) {
        code = static_cast<int>(ExitCode::runtime);
        tracker.mark_failed(code, std::string("internal error: ") + e.what(), "internal");
        spdlog::error("internal error: {}", e.what());
    }
    return write_report(tracker, console, report_path, report_writable, code);
}

void check_run_settings(const RunArgs & a, const HostOptions & options) {
    require_utf8(a);
    ResolveRequest rq;
    rq.preset = a.preset;
    rq.preset_dirs = {options.preset_dir};
    // --seed -1 is drawn by the run; any seed stands for it here.
    rq.sets = all_sets(a, a.seed && *a.seed == -1 ? std::optional<std::uint64_t>(0) : std::nullopt);
    rq.environment = current_environment();
    (void)resolve_settings(rq);
}

namespace {

}  // namespace

void add_run_options(CLI::App & app, RunArgs * a) {
    const char * g = "Run";
    app.add_option("--plugin", a->plugin, "model plugin: name or unique alias (ddo-host plugins)")->group(g);
    app.add_option("--preset", a->preset, "preset name or file (looked up in the presets directory); default: DDO_PRESET, else auto")
        ->group(g);
    app.add_option("--set", a->sets, "key=value override of a preset key (repeatable; docs/presets.md)")->group(g);
    app.add_option("--model", a->model, "checkpoint directory (diffusers layout)")->group(g);
    app.add_option("--prompt-embeds", a->prompt_embeds, "precomputed prompt embeddings file (ddo-host encode writes one)")
        ->group(g);
    app.add_option("--transformer", a->transformer, "a .safetensors or .gguf file replacing the checkpoint's transformer "
                                                    "weights (diffusers names or model.diffusion_model.*; SDNQ, FP8, GGUF)")
        ->group(g);
    app.add_option("--text-encoder", a->text_encoder, "a .safetensors or .gguf file replacing the checkpoint's text "
                                                      "encoder weights (its diffusers/transformers names)")
        ->group(g);
    app.add_option("--lora", a->loras, "a LoRA file to apply, FILE[:STRENGTH] (repeatable; strength default 1.0; "
                                       "lora.adapters): diffusers/PEFT, kohya, ComfyUI or Lightricks keys")
        ->group(g);
    app.add_option("--image", a->images, "a condition image, FILE[@FRAME] (repeatable; PNG, JPEG or WebP; FRAME: the "
                                         "video frame it conditions, default 0; workload.images)")
        ->group(g);
    app.add_option("--cache", a->cache, "step cache: off, first_block, mag, taylorseer or sea (cache.kind; docs/presets.md, [cache])")
        ->group(g);
    app.add_option("--fit", a->fit, "when a phase's memory forecast exceeds the budget: refuse (exit 2, naming what "
                                    "fits), auto (apply the cheapest settings that fit, listed in the report's "
                                    "adjustments) or off (fit.policy; Note [Fitting a run])")
        ->group(g);
    app.add_option("--strength", a->strength, "img2img strength in (0, 1] (workload.strength; unset = the plugin's "
                                              "default)")
        ->group(g);
    app.add_flag("--lora-allow-unmatched", a->lora_allow_unmatched,
                 "run when LoRA keys adapt no module (a warning in the report) instead of exit 2 (lora.allow_unmatched)")
        ->group(g);
    app.add_option("-p,--prompt", a->prompt, "prompt text (workload.prompt); needs a plugin with a text encoder")->group(g);
    app.add_option("--latents", a->latents, "initial noise: a safetensors file with tensor 'latents' (the pipeline's "
                                            "latents=) instead of the seeded draw")
        ->group(g);
    app.add_option("--save-latents", a->save_latents, "video plugins: write the denoised video and audio latents to "
                                                      "this safetensors file (the workload in its metadata) before "
                                                      "decoding, so that a failed decode is retried with --decode-latents")
        ->group(g);
    app.add_option("--decode-latents", a->decode_latents, "video plugins: decode a --save-latents file only (the VAEs "
                                                          "and the vocoder; no text encoder, no denoising) into the outputs")
        ->group(g);
    app.add_option("-n,--negative-prompt", a->negative_prompt, "negative prompt (workload.negative_prompt)")->group(g);
    app.add_option("--cfg-scale", a->cfg_scale, "guidance scale (workload.guidance_scale); > 1 guides when there is "
                                                "a negative prompt")
        ->group(g);
    app.add_option("--output", a->output, "output directory (default: the current one)")->group(g);
    app.add_option("-o,--output-file", a->output_file, "the image file itself (its directory is the output directory)")
        ->group(g);
    app.add_flag("--overwrite", a->overwrite, "replace an existing output or report (otherwise exit 2 before loading)")
        ->group(g);
    app.add_option("--report", a->report, "report JSON path (default: <output>/ddo_report.json, else ./ddo_report.json)")
        ->group(g);
    app.add_option("--steps", a->steps, "shorthand for --set workload.steps=N")->group(g);
    app.add_option("--width", a->width, "shorthand for --set workload.width=W")->group(g);
    app.add_option("--height", a->height, "shorthand for --set workload.height=H")->group(g);
    app.add_option("--frames", a->frames, "shorthand for --set workload.frames=N (video plugins)")->group(g);
    app.add_option("--fps", a->fps, "shorthand for --set workload.fps=R (video plugins)")->group(g);
    app.add_option("--seed", a->seed, "shorthand for --set workload.seed=S; -1 = random (recorded)")->group(g);
    app.add_option("--num-images,--batch-count", a->num_images,
                   "images per prompt (workload.num_images; diffusers' num_images_per_prompt)")
        ->group(g);
    app.add_flag("--dry-run", a->dry_run, "resolve, load and record; the plugin computes nothing")->group(g);
    app.add_flag("--hash-weights", a->hash_weights,
                 "record a full content hash (sha256 + xxh3) of every checkpoint file in the report (reads the whole "
                 "checkpoint once more; the cost is recorded); default: header hashes only")
        ->group(g);
    app.add_option("--machine", a->machine, "a machine profile the memory forecast is held against (presets/machines/"
                                            "NAME.toml: rtx3060-12g, rtx4060-8g, rtx4070-12g, rtx4090-24g, rtx5090-32g)")
        ->group(g);
    app.add_option("--device-memory", a->device_memory, "device memory the forecast is held against, e.g. 8GiB (over "
                                                       "--machine's); default: the device's available memory")
        ->group(g);
    app.add_option("--host-memory", a->host_memory, "host memory the forecast is held against, e.g. 32GiB; default: "
                                                   "MemAvailable within the memory cgroup, less capacities.ram_headroom_gb")
        ->group(g);
}

namespace {

void install(CLI::App & app, HostOptions & options) {
    auto a = std::make_shared<RunArgs>();
    auto argv = std::make_shared<std::vector<std::string>>();
    add_run_options(app, a.get());
    app.final_callback([&app, a, &options] {
        if (!app.get_subcommands().empty()) return;
        if (a->plugin.empty()) {
            if (!a->preset.empty() || !a->sets.empty() || a->dry_run || !a->model.empty())
                throw UsageError("--plugin NAME is required to run (list them with: ddo-host plugins)");
            std::cout << app.help();
            return;
        }
        options.exit_code = run_from_cli(*a, app, options);
    });
}

const RegisterCommand reg{90, install};

}  // namespace

int run_from_cli(RunArgs a, const CLI::App & app, const HostOptions & options, std::vector<std::string> argv) {
    if (a.preset.empty()) {
        const char * env = std::getenv("DDO_PRESET");
        a.preset = env && *env ? env : "auto";
    }
    for (const auto & o : app.get_options())
        if (o->count() > 0)
            for (const auto & r : o->results()) argv.push_back(o->get_name() + "=" + r);
    return run_once(a, options, argv);
}

}  // namespace ddo::host
