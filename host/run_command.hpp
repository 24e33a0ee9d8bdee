// The run form of ddo-host (cmd_run.cpp), callable from other commands (`preset show --plan` runs it dry).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "ddo/run_context.hpp"

namespace ddo {
class PluginRegistry;  // ddo/plugin/plugin_registry.hpp
struct SessionSlot;    // ddo/run_session.hpp
}

namespace ddo::host {

struct RunArgs {
    std::string plugin, preset;
    std::vector<std::string> sets;
    std::string model, prompt_embeds, latents, output, output_file, report;
    std::string save_latents, decode_latents;  // --save-latents FILE, --decode-latents FILE (video plugins)
    std::string transformer, text_encoder;  // --transformer FILE, --text-encoder FILE (Note [Component files])
    std::vector<std::string> loras;         // --lora FILE[:STRENGTH] (repeatable): lora.adapters
    bool lora_allow_unmatched = false;      // --lora-allow-unmatched: lora.allow_unmatched = true
    std::vector<std::string> images;        // --image FILE[@FRAME] (repeatable): workload.images
    std::optional<double> strength;         // --strength S: workload.strength
    std::optional<std::string> cache;       // --cache KIND: cache.kind
    std::optional<std::string> fit;         // --fit POLICY: fit.policy (refuse, auto, off)
    std::optional<std::string> prompt, negative_prompt;
    std::optional<long long> steps, width, height, seed, num_images, frames;
    std::optional<double> fps;
    std::optional<double> cfg_scale;
    bool dry_run = false;
    bool hash_weights = false;
    bool overwrite = false;
    bool encode_only = false;  // `ddo-host encode`: the plugin writes the prompt embeddings to output_file only
    // The machine the memory forecast is held against (host/machine_spec.hpp): --machine NAME, --device-memory SIZE,
    // --host-memory SIZE.
    std::string machine;
    std::string device_memory, host_memory;  // empty: not given
};

// The run form's options into `app` (the top-level run, `ddo-host plan`); `a` is borrowed for app's life.
void add_run_options(CLI::App & app, RunArgs * a);

// What a caller other than the command line (ddo-host serve, host/serve/job_runner.cpp) changes in a run; the
// defaults are the CLI's.
struct RunHooks {
    std::atomic<bool> * interrupted = nullptr;  // borrowed; the flag the run polls. Null: the process's signal flag
    // What interrupted and its exit code ({"interrupted by DELETE /v1/jobs/ID", 130}); empty: the signal, 128 + signal.
    std::function<std::pair<std::string, int>()> interruption;
    std::function<void(const ProgressEvent &)> progress;  // the kit's progress events, besides the console's; may be empty
    bool console = true;                                  // the console display (plan, bars, the end summary)
    // Borrowed: the plugins found and loaded once for many runs (a plugin verified and loaded stays loaded for the
    // process: Note [Plugin unloading]). Null: the run discovers its own, as the CLI does.
    PluginRegistry * registry = nullptr;
    // Borrowed: what the server keeps between its runs (weights, prompt embeddings; ddo/run_session.hpp). Null: the
    // run keeps nothing, as the CLI's.
    SessionSlot * session = nullptr;
};

// One run: resolve, verify and load the plugin, run it (or dry), write the report. Returns the exit code.
int run_once(const RunArgs & a, const HostOptions & options, const std::vector<std::string> & argv);
int run_once(const RunArgs & a, const HostOptions & options, const std::vector<std::string> & argv, const RunHooks & hooks);

// The settings a run would resolve before its plugin loads (the preset, the --set keys and shorthands, UTF-8
// text): throws UsageError naming the key. `ddo-host serve` checks a request with it before queueing the job.
void check_run_settings(const RunArgs & a, const HostOptions & options);

// run_once for the options parsed into `app` (the run form, `encode`): the preset defaulted (DDO_PRESET, else auto)
// and the given options recorded as --name=value, after `argv_prefix` (a subcommand's name).
int run_from_cli(RunArgs a, const CLI::App & app, const HostOptions & options, std::vector<std::string> argv_prefix = {});

}  // namespace ddo::host
