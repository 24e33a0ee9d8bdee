#include "ddo/preset/preset_schema.hpp"

#include <algorithm>
#include <cctype>

namespace ddo {

const char * to_string(KeyType t) {
    switch (t) {
    case KeyType::boolean: return "boolean";
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::string: return "string";
    case KeyType::enumeration: return "string (one of a fixed set)";
    case KeyType::string_or_list: return "string or array of strings";
    case KeyType::number_list: return "array of numbers";
    }
    return "?";
}

namespace {

using nlohmann::json;

KeyDef num(std::string key, double lo, double hi, json def, std::string doc, std::string by = "all model plugins") {
    KeyDef k{std::move(key), KeyType::number, lo, hi, {}, std::move(def), std::move(doc), std::move(by)};
    return k;
}
KeyDef integer(std::string key, double lo, double hi, json def, std::string doc, std::string by = "all model plugins") {
    KeyDef k{std::move(key), KeyType::integer, lo, hi, {}, std::move(def), std::move(doc), std::move(by)};
    return k;
}
KeyDef choice(std::string key, std::vector<std::string> choices, json def, std::string doc,
              std::string by = "all model plugins") {
    KeyDef k{std::move(key), KeyType::enumeration, std::nullopt, std::nullopt, std::move(choices), std::move(def),
             std::move(doc), std::move(by)};
    return k;
}
KeyDef boolean(std::string key, bool def, std::string doc, std::string by = "all model plugins") {
    KeyDef k{std::move(key), KeyType::boolean, std::nullopt, std::nullopt, {}, def, std::move(doc), std::move(by)};
    return k;
}
KeyDef str(std::string key, json def, std::string doc, std::string by = "all model plugins") {
    KeyDef k{std::move(key), KeyType::string, std::nullopt, std::nullopt, {}, std::move(def), std::move(doc), std::move(by)};
    return k;
}

const std::vector<std::string> kRoutes = {"resident", "component", "group_block", "group_leaf", "dynamic", "disk"};

// The preset metadata, capacities, planner, lifecycle, telemetry, VAE and per-component keys.
void add_run_keys(std::vector<KeyDef> & s) {
    // Metadata (preset files only; not settable with --set or DDO_*).
    s.push_back(integer("schema_version", 1, 1, 1, "Preset schema version. Required in every preset file; must be 1."));
    s.push_back(str("description", nullptr, "One paragraph: the preset's intent and trade-off."));
    s.push_back(KeyDef{"inherits", KeyType::string_or_list, std::nullopt, std::nullopt, {}, nullptr,
                       "Parent preset(s) by name or file, resolved next to this file. Later parents beat earlier "
                       "ones; this file beats all of them. A cycle is an error."});
    s.push_back(str("auto.linux", nullptr, "`auto` only: preset used on native Linux."));
    s.push_back(str("auto.wsl", nullptr, "`auto` only: preset used on WSL."));
    s.push_back(str("auto.other", nullptr, "`auto` only: preset used on any other platform."));

    // Capacities.
    s.push_back(num("capacities.device_budget_gb", 0, 4096, 0.0,
                    "GPU memory (GiB) the engine may use for weights, slots and residents. 0 = auto: "
                    "free device memory at start minus 1 GiB."));
    s.push_back(num("capacities.resident_budget_gb", 0, 4096, 0.0,
                    "GiB of weights kept resident on the device by the `dynamic` planner. 0 = auto "
                    "(balanced against the device budget)."));
    s.push_back(num("capacities.pinned_host_budget_gb", 0, 65536, 0.0,
                    "GiB of page-locked host memory for streamed weights. 0 = auto (RAM-aware: pins only "
                    "what available RAM minus ram_headroom_gb covers)."));
    s.push_back(boolean("capacities.pin_host_memory", true,
                        "Whether any page-locked (pinned) host memory is allocated. false = none at all: host "
                        "copies of streamed groups stay pageable (the planner's pinned budget is 0) and the disk "
                        "staging buffers are pageable; the pinned route is never asked. Registration of existing "
                        "memory is separate and governed by host_registration."));
    s.push_back(num("capacities.ram_headroom_gb", 0, 65536, 6.0,
                    "GiB of system RAM that pinning and staging must leave available."));
    s.push_back(integer("capacities.staging_slots", 1, 64, 2,
                        "Bounded pinned staging slots for `disk` (and pageable `dynamic`) streaming. Each slot "
                        "must fit a complete execution group."));
    s.push_back(integer("capacities.prefetch_depth", 0, 16, 1,
                        "Groups/blocks uploaded ahead of compute. 0 = synchronous upload."));
    s.push_back(choice("capacities.host_registration", {"full", "bounded", "off"}, "full",
                       "Host memory registration (page-locking) for streamed sources: `full` registers every "
                       "source, `bounded` registers up to host_registration_ceiling_gb, `off` uses pageable "
                       "copies."));
    s.push_back(num("capacities.host_registration_ceiling_gb", 0, 65536, 0.0,
                    "Ceiling (GiB) of registered host memory; must be > 0 when host_registration = bounded."));
    s.push_back(str("capacities.allocator", "auto",
                    "Allocator plugin name (`ddo-host plugins`). `auto` = the first verified allocator plugin, "
                    "else the engine's built-in one."));
    s.push_back(choice("capacities.allocator_backend", {"auto", "host", "cuda"}, "auto",
                       "Allocator backend: `cuda` device memory, `host` memory standing in for the device "
                       "(CPU transport, CI), `auto` = cuda when a device is usable."));

    // Planner.
    s.push_back(choice("planner.selection", {"first", "spread", "largest"}, "spread",
                       "How the `dynamic` planner picks resident modules under the resident budget: "
                       "the first ones, spread evenly over depth, or the largest."));

    // Runtime lifecycle.
    s.push_back(integer("runtime.generation_repeats", 1, 100, 1,
                        "Generations per run on weights loaded once; phases of generation g > 1 are recorded as "
                        "'<phase> (generation g)' and its outputs are compared with generation 1's, not rewritten."));

    // Telemetry (the report's memory monitors; Note [Telemetry cost] in docs/metrics.md).
    s.push_back(integer("telemetry.sample_interval_ms", 10, 60000, 100,
                        "Interval of the cheap memory monitors (RSS from statm, MemAvailable, cgroup, NVML, torch)."));
    s.push_back(num("telemetry.cpu_budget_percent", 0.01, 100, 1.0,
                    "CPU time all telemetry reads may take, as a percent of the run's wall time: USS (smaps_rollup) "
                    "is read at every phase boundary and between them only within this budget."));

    // VAE.
    s.push_back(choice("vae.strategy", {"resident", "leaf_offload", "tiled", "temporal_stream", "auto"}, "auto",
                       "VAE decode strategy. `auto` follows the decision table of docs/presets.md: resident if it "
                       "fits, else leaf_offload if RAM allows, else tiled (temporal_stream for video)."));
    s.push_back(integer("vae.tile_size", 64, 8192, 512, "Tile edge in pixels for `tiled` (multiple of 8)."));
    s.push_back(integer("vae.tile_overlap", 0, 4096, 64, "Tile overlap in pixels for `tiled`; < tile_size."));
    s.push_back(integer("vae.temporal_frames", 1, 4096, 16, "Frames per window for `temporal_stream`.",
                        "video model plugins"));

    // Fitting a run to its memory (Note [Fitting a run] in docs/architecture.md).
    s.push_back(choice("fit.policy", {"refuse", "auto", "off"}, "refuse",
                       "When the memory forecast of a phase exceeds the budget: refuse = exit 2 before anything loads, "
                       "naming what would fit; auto = apply the cheapest settings that fit (vae.strategy, then "
                       "components.transformer.route dynamic, then disk), each listed in the report's adjustments, and "
                       "run; off = run anyway (a warning). --fit POLICY sets it."));

    // Per component.
    s.push_back(choice("components.*.route", kRoutes, "component",
                       "How this component's weights reach the device (docs/presets.md, Routes)."));
    s.push_back(boolean("components.*.use_stream", true,
                        "group_block/group_leaf: upload on a side stream one group ahead. false = synchronous."));
    s.push_back(integer("components.*.blocks_per_group", 1, 1024, 1, "group_block: blocks per offload group."));
    s.push_back(num("components.*.resident_budget_gb", 0, 4096, nullptr,
                    "Overrides capacities.resident_budget_gb for this component. Unset = the global value."));
    s.push_back(integer("components.*.staging_slots", 1, 64, nullptr,
                        "Overrides capacities.staging_slots for this component."));
    s.push_back(integer("components.*.prefetch_depth", 0, 16, nullptr,
                        "Overrides capacities.prefetch_depth for this component."));
    s.push_back(choice("components.*.selection", {"first", "spread", "largest"}, nullptr,
                       "Overrides planner.selection for this component."));

}

// The workload, condition-image and LoRA keys.
void add_workload_keys(std::vector<KeyDef> & s) {
    // Workload (may also be given as --steps/--width/... on the run command line).
    s.push_back(integer("workload.steps", 1, 10000, nullptr, "Denoise steps. Unset = the plugin's default."));
    s.push_back(integer("workload.width", 16, 16384, nullptr, "Output width in pixels. Unset = plugin default."));
    s.push_back(integer("workload.height", 16, 16384, nullptr, "Output height in pixels. Unset = plugin default."));
    s.push_back(integer("workload.frames", 1, 100000, nullptr, "Frames (video plugins). Unset = plugin default.",
                        "video model plugins"));
    s.push_back(num("workload.fps", 1, 240, nullptr, "Frame rate of the clip (video plugins). Unset = plugin default.",
                    "video model plugins"));
    s.push_back(integer("workload.seed", 0, 9007199254740991.0, nullptr, "Random seed. Unset = plugin default."));
    s.push_back(integer("workload.num_images", 1, 64, nullptr,
                        "Images per prompt (diffusers' num_images_per_prompt: one noise draw for all of them from "
                        "the one seed). Unset = 1."));
    s.push_back(choice("workload.precision", {"bf16", "fp16", "fp32"}, nullptr,
                       "Compute precision. Unset = plugin default."));
    s.push_back(str("workload.prompt", nullptr, "Prompt text. Unset = plugin default (or --prompt-embeds)."));
    s.push_back(str("workload.negative_prompt", nullptr, "Negative prompt. Unset = none."));
    s.push_back(KeyDef{"workload.sigmas", KeyType::number_list, 0.0, 1.0, {}, nullptr,
                       "Sampling sigmas, excluding the terminal one (the pipeline's sigmas=); their count is the "
                       "number of steps. Unset = the checkpoint's sample_sigmas, else the plugin's default grid."});
    s.push_back(num("workload.guidance_scale", 0, 100, nullptr, "Guidance scale. Unset = plugin default."));
    // Condition images (issue 28; Note [Image input] in docs/architecture.md).
    s.push_back(KeyDef{"workload.images", KeyType::string_or_list, std::nullopt, std::nullopt, {}, nullptr,
                       "Condition images, each \"PATH[@FRAME]\" (PNG, JPEG or WebP; FRAME: the video frame it "
                       "conditions, default 0). A relative path in a preset file is relative to that file. "
                       "--image FILE[@FRAME] (repeatable) sets it. Unset = none (text only).",
                       "model plugins that take images"});
    s.push_back(num("workload.strength", 0, 1, nullptr,
                    "How much of the condition image is re-noised (img2img strength), in (0, 1]. Unset = the "
                    "plugin's default. --strength S sets it.",
                    "model plugins that take images"));
    // LoRA (issue 27; Note [Applying LoRA] in docs/architecture.md).
    s.push_back(KeyDef{"lora.adapters", KeyType::string_or_list, std::nullopt, std::nullopt, {}, nullptr,
                       "LoRA files to apply, each \"PATH[:STRENGTH[:COMPONENT]]\" (strength default 1.0; COMPONENT: "
                       "the component a file's unprefixed keys adapt, default transformer). A relative path in a "
                       "preset file is relative to that file. --lora FILE[:STRENGTH] (repeatable) sets it. Unset = "
                       "none."});
    s.push_back(choice("lora.apply", {"runtime", "merge"}, "runtime",
                       "How LoRA factors reach the weights: runtime = the low-rank term added at every call "
                       "(every route, every weight format; the stored weights untouched); merge = B A added once "
                       "into the weights of resident groups (a merged copy; streamed groups stay at run time)."));
    s.push_back(boolean("lora.allow_unmatched", false,
                        "LoRA keys that adapt no module of the run are an error (exit 2) unless true: then a "
                        "warning, recorded in the report. --lora-allow-unmatched sets it."));
}

// Step caching (issue 41; Note [Step caching] in docs/architecture.md). Each kind's keys carry diffusers' names and
// defaults (FirstBlockCacheConfig, MagCacheConfig); a key of another kind than cache.kind is refused by the kit.
void add_cache_keys(std::vector<KeyDef> & s) {
    const std::string by = "model plugins with a denoising loop";
    s.push_back(choice("cache.kind", {"off", "first_block", "mag", "taylorseer", "sea"}, "off",
                       "Step cache: reuse transformer work between denoising steps (its skipped blocks are neither "
                       "computed nor streamed). off = every block of every step; first_block = diffusers' "
                       "FirstBlockCache (block 0 always runs; the rest are reused while its residual changes less than "
                       "threshold); mag = MagCache (whole steps reused by the accumulated error of mag_ratios); "
                       "taylorseer = TaylorSeerCache (module outputs predicted by a Taylor expansion between full "
                       "computations every cache_interval steps); sea = SeaCache (the whole block stack reused while the accumulated change "
                       "of the spectrally filtered latents stays below threshold). --cache KIND sets it.",
                       by));
    s.push_back(num("cache.threshold", 0, 100, nullptr,
                    "first_block: relative L1 change of block 0's residual below which the other blocks are reused "
                    "(default 0.05); mag: accumulated error up to which a step is reused (default 0.06); sea: the "
                    "accumulated relative L1 change of the filtered latents below which a pass is reused (default "
                    "0.25).",
                    by));
    s.push_back(integer("cache.max_skip_steps", 1, 1000, 3, "mag: consecutive steps reused at most.", by));
    s.push_back(num("cache.retention_ratio", 0, 1, 0.2,
                    "mag: the first round(retention_ratio x steps) steps are always computed.", by));
    s.push_back(KeyDef{"cache.mag_ratios", KeyType::number_list, 0.0, 100.0, {}, nullptr,
                       "mag: the checkpoint's per-step magnitude ratios (resampled to the run's steps as diffusers "
                       "does). Required unless calibrate; a calibration run writes them to mag_ratios.toml.",
                       by});
    s.push_back(boolean("cache.calibrate", false,
                        "mag: compute every step and measure the ratios; written to the report and to "
                        "<output>/mag_ratios.toml, a preset to inherit.",
                        by));
    s.push_back(integer("cache.cache_interval", 1, 1000, 5,
                        "taylorseer: after the warm-up, a full computation every cache_interval steps; the steps "
                        "between are predicted.",
                        by));
    s.push_back(integer("cache.disable_cache_before_step", 0, 10000, 3,
                        "taylorseer: the first steps compute in full and gather the expansion's factors.", by));
    s.push_back(integer("cache.disable_cache_after_step", 0, 10000, nullptr,
                        "taylorseer: from this step on every step computes (unset: none).", by));
    s.push_back(integer("cache.max_order", 0, 8, 1, "taylorseer: the highest order of the Taylor expansion.", by));
    s.push_back(choice("cache.taylor_factors_dtype", {"bf16", "fp16", "fp32"}, "bf16",
                       "taylorseer: the dtype the factors are kept in (diffusers' taylor_factors_dtype).", by));
    s.push_back(KeyDef{"cache.cache_identifiers", KeyType::string_or_list, std::nullopt, std::nullopt, {}, nullptr,
                       "taylorseer: regular expressions matched against whole diffusers module names; the matched "
                       "modules are predicted (unset: diffusers' attention set, ^transformer_blocks.*attn and its "
                       "siblings). A pattern matching a module the plugin cannot route through the cache is refused.",
                       by});
    s.push_back(KeyDef{"cache.skip_predict_identifiers", KeyType::string_or_list, std::nullopt, std::nullopt, {},
                       nullptr,
                       "taylorseer: module-name patterns that compute on full steps and return zeros of the recorded "
                       "shape when predicting (a skipped block is then neither computed nor streamed).",
                       by});
    s.push_back(boolean("cache.use_lite_mode", false,
                        "taylorseer: diffusers' lite variant: every transformer block skipped (zeros) and proj_out "
                        "predicted on the predicted steps; excludes the two identifier keys.",
                        by));
    s.push_back(integer("cache.residual_order", 0, 1, 1,
                        "sea: 0 reuses the last residual; 1 extrapolates it from the last two full passes.", by));
    s.push_back(integer("cache.retention_steps", 0, 10000, 1, "sea: the first steps always compute.", by));
    s.push_back(integer("cache.cache_end_steps", 0, 10000, 1, "sea: the last steps always compute.", by));
    s.push_back(integer("cache.max_consecutive_cached", 0, 10000, 2,
                        "sea: passes reused in a row at most before a full one (0: no limit).", by));
    s.push_back(num("cache.power_exp", 1e-6, 100, 3.0,
                    "sea: exponent of the clean-signal power prior of the spectral filter.", by));
    s.push_back(integer("cache.min_steps", 1, 10000, 10,
                        "A schedule shorter than this is refused with a cache on (distilled few-step runs have little "
                        "to reuse and run slower), unless allow_few_steps.",
                        by));
    s.push_back(boolean("cache.allow_few_steps", false, "Run a cache on a schedule shorter than cache.min_steps.", by));
}

}  // namespace

const std::vector<KeyDef> & preset_schema() {
    static const std::vector<KeyDef> schema = [] {
        std::vector<KeyDef> s;
        add_run_keys(s);
        add_workload_keys(s);
        add_cache_keys(s);
        return s;
    }();
    return schema;
}

const std::vector<std::string> & known_components() {
    static const std::vector<std::string> c = {"text_encoder", "text_encoder_2", "connectors", "transformer", "vae",
                                               "audio_vae",    "vocoder",        "image_encoder", "controlnet",
                                               "latent_upsampler", "vision_tower"};
    return c;
}

const KeyDef * find_key(std::string_view key, std::string * component) {
    constexpr std::string_view kComp = "components.";
    if (key.starts_with(kComp)) {
        auto rest = key.substr(kComp.size());
        auto dot = rest.find('.');
        if (dot == std::string_view::npos || dot == 0) return nullptr;
        std::string pattern = "components.*." + std::string(rest.substr(dot + 1));
        for (const auto & k : preset_schema())
            if (k.key == pattern) {
                if (component) *component = std::string(rest.substr(0, dot));
                return &k;
            }
        return nullptr;
    }
    for (const auto & k : preset_schema())
        if (k.key == key) return &k;
    return nullptr;
}

std::vector<std::string> concrete_keys(const std::vector<std::string> & components) {
    std::vector<std::string> out;
    for (const auto & k : preset_schema()) {
        if (k.key.starts_with("components.*.")) {
            for (const auto & c : components) out.push_back("components." + c + k.key.substr(12));
        } else {
            out.push_back(k.key);
        }
    }
    return out;
}

std::string env_name_for(std::string_view key) {
    std::string k(key);
    if (k.starts_with("components.")) k = k.substr(11);
    std::string out = "DDO_";
    for (char ch : k) out += (ch == '.') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return out;
}

}  // namespace ddo
