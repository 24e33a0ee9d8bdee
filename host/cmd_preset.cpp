// ddo-host preset show | diff | check: review tooling for presets (docs/presets.md).
#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <iostream>
#include <set>

#include "command_registry.hpp"
#include "run_command.hpp"
#include "ddo/preset/preset_resolver.hpp"

namespace ddo::host {

namespace {

namespace fs = std::filesystem;

std::optional<PlatformInfo> platform_from_flag(const std::string & flag) {
    if (flag.empty()) return std::nullopt;
    if (flag == "linux") return PlatformInfo{Platform::linux_native, "--platform linux"};
    if (flag == "wsl") return PlatformInfo{Platform::wsl, "--platform wsl"};
    if (flag == "other") return PlatformInfo{Platform::other, "--platform other"};
    throw UsageError("--platform '" + flag + "': expected linux | wsl | other");
}

std::string value_text(const nlohmann::json & v) {
    if (v.is_null()) return "(unset)";
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

// What a value is in effect when the key itself is unset or auto: a per-component override falls back to the
// global value; a budget of 0 is decided by the engine at run time from the machine.
std::string effective_text(const ResolvedSettings & s, const std::string & key, const nlohmann::json & v) {
    static const std::vector<std::string> kOverrides = {"resident_budget_gb", "staging_slots", "prefetch_depth", "selection"};
    if (key.starts_with("components.") && v.is_null()) {
        const auto dot = key.find('.', 11);
        const std::string c = key.substr(11, dot - 11), k = key.substr(dot + 1);
        if (std::find(kOverrides.begin(), kOverrides.end(), k) != kOverrides.end()) {
            const std::string global = k == "selection" ? "planner.selection" : "capacities." + k;
            return value_text(s.at(global).value) + " (from " + global + ")";
        }
    }
    if (key.starts_with("workload.") && v.is_null()) return "(the plugin's default)";
    if (key == "lora.adapters" && v.is_null()) return "(none)";
    if (key == "cache.threshold" && v.is_null()) {  // the kind's default (StepCacheSettings)
        const auto kind = s.get_optional<std::string>("cache.kind").value_or("off");
        return kind == "mag" ? "0.06 (mag's default)" : kind == "first_block" ? "0.05 (first_block's default)" : "(not used: cache.kind off)";
    }
    if (key == "cache.mag_ratios" && v.is_null()) return "(none: mag needs them or cache.calibrate)";
    if (key == "cache.cache_identifiers" && v.is_null())
        return "(taylorseer: diffusers' attention set, ^transformer_blocks.*attn and siblings)";
    if (key == "cache.skip_predict_identifiers" && v.is_null()) return "(none)";
    if (key == "cache.disable_cache_after_step" && v.is_null()) return "(none: the last steps are predicted too)";
    if (key.ends_with("_budget_gb") && v.is_number() && v.get<double>() == 0)
        return "0 (auto: from the machine at run start)";
    return value_text(v);
}

void print_settings(const ResolvedSettings & s) {
    const auto & p = s.preset();
    std::cout << "preset: requested " << (p.requested.empty() ? "(none)" : p.requested) << ", effective "
              << (p.effective.empty() ? "(none)" : p.effective) << " (" << p.reason << ")\n";
    std::cout << "platform: " << p.platform << " (" << p.platform_evidence << ")\n";
    if (!p.file.empty()) std::cout << "file: " << p.file << "  sha256 " << p.file_sha256 << "\n";
    for (std::size_t i = 1; i < p.chain.size(); ++i) std::cout << "  inherits: " << p.chain[i] << "\n";
    if (!p.description.empty()) std::cout << "description: " << p.description << "\n";
    std::cout << "\n";
    std::printf("%-44s %-18s %s\n", "KEY", "VALUE", "SOURCE");
    for (const auto & [k, v] : s.values())
        std::printf("%-44s %-18s %s\n", k.c_str(), effective_text(s, k, v.value).c_str(), v.provenance.to_string().c_str());
}

ResolvedSettings resolve_for_review(const HostOptions & o, const std::string & preset, const std::vector<std::string> & sets,
                                    const std::string & platform, bool use_env) {
    ResolveRequest rq;
    rq.preset = preset;
    rq.preset_dirs = {o.preset_dir};
    rq.sets = sets;
    if (use_env) rq.environment = current_environment();
    rq.platform = platform_from_flag(platform);
    return resolve_settings(rq);
}

// preset show: the resolved values with provenance, or (--plan) a dry run of --plugin on --model.
struct ShowArgs {
    std::string name, platform;
    std::vector<std::string> sets;
    bool json = false, no_env = false;
    bool plan = false;
    std::string plugin, model, prompt_embeds;
};

// preset show --plan: what the planner would do, from a dry run that computes nothing and writes no file.
void show_plan(const ShowArgs & show_args, HostOptions & options) {
    if (show_args.plugin.empty() || show_args.model.empty())
        throw UsageError("preset show --plan needs --plugin NAME and --model DIR (the plan depends on the model)");
    RunArgs a;
    a.plugin = show_args.plugin;
    a.preset = show_args.name;
    a.sets = show_args.sets;
    a.model = show_args.model;
    a.prompt_embeds = show_args.prompt_embeds;
    a.dry_run = true;
    a.overwrite = true;
    const fs::path report = fs::temp_directory_path() / ("ddo_plan_" + std::to_string(::getpid()) + ".json");
    a.report = report.string();
    a.output = fs::temp_directory_path().string();
    options.exit_code = run_once(a, options, {"preset show --plan"});
    std::error_code ec;
    fs::remove(report, ec);
}

void install_show(CLI::App * preset, HostOptions & options) {
    auto show_args = std::make_shared<ShowArgs>();
    auto * show = preset->add_subcommand("show", "resolved values with provenance (defaults < preset < DDO_* < --set)");
    show->add_option("preset", show_args->name, "preset name or file")->required();
    show->add_option("--set", show_args->sets, "key=value (repeatable)");
    show->add_flag("--json", show_args->json, "print JSON");
    show->add_option("--platform", show_args->platform, "pretend the platform is linux | wsl | other (for auto)");
    show->add_flag("--no-env", show_args->no_env, "ignore DDO_* environment variables");
    show->add_flag("--plan", show_args->plan,
                   "what the planner would do with this preset on --model (resident / streamed groups, bytes): a dry "
                   "run of --plugin that computes nothing and writes no file");
    show->add_option("--plugin", show_args->plugin, "with --plan: the model plugin");
    show->add_option("--model", show_args->model, "with --plan: the checkpoint directory");
    show->add_option("--prompt-embeds", show_args->prompt_embeds, "with --plan: optional prompt embeddings to check too");
    show->callback([show_args, &options] {
        if (show_args->plan) return show_plan(*show_args, options);
        auto s = resolve_for_review(options, show_args->name, show_args->sets, show_args->platform, !show_args->no_env);
        if (show_args->json)
            std::cout << s.to_json().dump(2) << "\n";
        else
            print_settings(s);
    });
}

// The keys two resolved presets differ in: {key, a, a_source, b, b_source}, in key order.
nlohmann::json preset_differences(const ResolvedSettings & a, const ResolvedSettings & b) {
    std::set<std::string> keys;
    for (const auto & [k, _] : a.values()) keys.insert(k);
    for (const auto & [k, _] : b.values()) keys.insert(k);
    nlohmann::json out = nlohmann::json::array();
    for (const auto & k : keys) {
        nlohmann::json va = a.has(k) ? a.at(k).value : nlohmann::json("(absent)");
        nlohmann::json vb = b.has(k) ? b.at(k).value : nlohmann::json("(absent)");
        if (va == vb) continue;
        out.push_back({{"key", k},
                       {"a", va},
                       {"a_source", a.has(k) ? a.at(k).provenance.to_string() : ""},
                       {"b", vb},
                       {"b_source", b.has(k) ? b.at(k).provenance.to_string() : ""}});
    }
    return out;
}

void print_differences(const ResolvedSettings & a, const ResolvedSettings & b, const nlohmann::json & out) {
    std::cout << "A: " << a.preset().requested << " (effective " << a.preset().effective << ")\n"
              << "B: " << b.preset().requested << " (effective " << b.preset().effective << ")\n\n";
    if (out.empty()) {
        std::cout << "no differences in resolved values\n";
        return;
    }
    std::printf("%-40s %-14s %-34s %-14s %s\n", "KEY", "A", "A SOURCE", "B", "B SOURCE");
    for (const auto & d : out)
        std::printf("%-40s %-14s %-34s %-14s %s\n", d["key"].get<std::string>().c_str(), value_text(d["a"]).c_str(),
                    d["a_source"].get<std::string>().c_str(), value_text(d["b"]).c_str(),
                    d["b_source"].get<std::string>().c_str());
}

// preset diff: the resolved differences of two presets; exit 1 when they differ (diff's convention).
void install_diff(CLI::App * preset, HostOptions & options) {
    struct DiffArgs {
        std::string a, b, platform;
        bool json = false;
    };
    auto diff_args = std::make_shared<DiffArgs>();
    auto * diff = preset->add_subcommand(
        "diff", "resolved differences between two presets (environment ignored); exit 0 same, 1 different, like diff");
    diff->add_option("a", diff_args->a, "first preset")->required();
    diff->add_option("b", diff_args->b, "second preset")->required();
    diff->add_option("--platform", diff_args->platform, "pretend the platform is linux | wsl | other");
    diff->add_flag("--json", diff_args->json, "print JSON");
    diff->callback([diff_args, &options] {
        struct ExitOnDifference {  // exit 1 when the presets resolve differently (diff's convention)
            HostOptions & o;
            bool different = false;
            ~ExitOnDifference() { if (different) o.exit_code = 1; }
        } exit_code{options};
        auto a = resolve_for_review(options, diff_args->a, {}, diff_args->platform, false);
        auto b = resolve_for_review(options, diff_args->b, {}, diff_args->platform, false);
        const nlohmann::json out = preset_differences(a, b);
        exit_code.different = !out.empty();
        if (diff_args->json)
            std::cout << out.dump(2) << "\n";
        else
            print_differences(a, b, out);
    });
}

// preset check: lint preset files; exit 2 on any error.
void install_check(CLI::App * preset, HostOptions & options) {
    auto files = std::make_shared<std::vector<std::string>>();
    auto * check = preset->add_subcommand("check", "lint preset files: syntax, keys, types, ranges, inherits (exit 2 on any error)");
    check->add_option("files", *files, "preset files")->required();
    check->callback([files, &options] {
        int errors = 0, bad_files = 0;
        for (const auto & f : *files) {
            const fs::path file = fs::path(f).has_parent_path() || fs::exists(f) ? fs::absolute(f) : fs::path(f);
            const auto found = lint_preset_file(file, {options.preset_dir});
            if (found.empty()) {
                std::cout << "ok      " << f << "\n";
                continue;
            }
            ++bad_files;
            errors += int(found.size());
            for (const auto & e : found) std::cout << "error   " << e.what() << "\n";  // in file:line:column order
        }
        if (errors) {
            std::cout << errors << " error(s) in " << bad_files << " of " << files->size() << " preset file(s)\n";
            options.exit_code = static_cast<int>(ExitCode::usage);
        }
    });
}

void install(CLI::App & app, HostOptions & options) {
    auto * preset = app.add_subcommand("preset", "show, compare and lint presets");
    preset->require_subcommand(1);
    install_show(preset, options);
    install_diff(preset, options);
    install_check(preset, options);
}

const RegisterCommand reg{30, install};

}  // namespace

}  // namespace ddo::host
