// `ddo-host plugins [--json]` lists every plugin directory's artifacts with their verification
// status; `ddo-host verify` hashes every listed artifact without loading any (exit 0 / 3).
// Order of checks: docs/architecture.md, "Artifact manifest, verification and loading order".
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "command_registry.hpp"
#include "model_table.hpp"
#include "ddo/error.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/plugin/plugin_registry.hpp"
#include "ddo/plugin/plugin_search_path.hpp"

namespace ddo::host {

namespace {

namespace fs = std::filesystem;

struct PluginsArgs {
    bool json = false;
    std::vector<fs::path> only_dirs;  // subcommand --plugin-dir: check only these directories
};

// Global --plugin-dir adds to the builtin directory and DDO_PLUGIN_PATH; the subcommand's
// --plugin-dir names exactly the directories to look at (e.g. an installed copy).
std::vector<fs::path> directories(const HostOptions & options, const PluginsArgs & args) {
    if (!args.only_dirs.empty()) return plugin_search_dirs(fs::path(), args.only_dirs, std::string());
    return plugin_search_dirs(options.builtin_plugin_dir, options.plugin_dirs);
}

std::string status_text(const PluginRecord & r) {
    switch (r.status) {
        case PluginStatus::listed: return "listed";
        case PluginStatus::verified: return "verified";
        case PluginStatus::loaded: return "verified";  // loaded to read its table: verified first
        case PluginStatus::refused: return std::string("refused: ") + to_string(r.refusal);
    }
    return "unknown";
}

std::string join(const std::vector<std::string> & items, const char * sep) {
    std::string out;
    for (const auto & s : items) out += (out.empty() ? "" : sep) + s;
    return out;
}

// What a loaded model plugin says of itself (its vtable): description, components, supported options.
struct ModelFacts {
    std::string description;
    std::vector<std::string> components, options, pipelines;
};

// Loads every verified model plugin to read its table (verified bytes only; a failure to load is recorded as the
// record's refusal, as a run would see it).
std::map<std::string, ModelFacts> model_facts(PluginRegistry & registry) {
    std::map<std::string, ModelFacts> out;
    // A plugin's own info lines while it hands over its table are noise in a listing (and would break --json on
    // stdout): warnings and errors only, for the duration.
    const auto level = spdlog::get_level();
    spdlog::set_level(spdlog::level::warn);
    struct Restore {
        spdlog::level::level_enum level;
        ~Restore() { spdlog::set_level(level); }
    } restore{level};
    std::vector<std::string> names;
    for (const auto & r : registry.records())
        if (r.status != PluginStatus::refused && r.kind == "model") names.push_back(r.name);
    for (const auto & n : names) {
        try {
            const LoadedPlugin & p = registry.load(n, "model");
            if (!p.model) continue;
            out[n] = {p.model->description ? p.model->description : "", c_list(p.model->components),
                      c_list(p.model->supported_options), pipeline_classes(p.model)};
        } catch (const std::exception &) {  // the record now says why
        }
    }
    return out;
}

nlohmann::json to_json(const PluginRecord & r) {
    nlohmann::json j;
    j["name"] = r.name;
    j["kind"] = r.kind;
    j["version"] = r.version;
    j["aliases"] = r.aliases;
    j["file"] = r.artifact.path.string();
    j["manifest"] = r.artifact.manifest.string();
    j["sha256"] = r.actual_sha256;
    j["sha256_short"] = short_digest(r.actual_sha256);
    j["expected_sha256"] = r.artifact.sha256;
    j["xxh3_128"] = r.xxh3_128;
    j["abi"] = r.abi_major == 0 ? "" : std::to_string(r.abi_major) + "." + std::to_string(r.abi_minor);
    j["fingerprint"] = r.fingerprint.empty() ? r.artifact.fingerprint : r.fingerprint;
    j["status"] = r.status == PluginStatus::refused ? "refused" : "verified";
    j["refusal"] = r.status == PluginStatus::refused ? nlohmann::json(to_string(r.refusal)) : nlohmann::json(nullptr);
    j["reason"] = r.status == PluginStatus::refused ? nlohmann::json(r.refusal_reason) : nlohmann::json(nullptr);
    return j;
}

void print_table(const PluginRegistry & registry, const std::map<std::string, ModelFacts> & facts) {
    std::cout << "plugin directories (in lookup order):\n";
    for (const auto & dir : registry.dirs()) {
        std::error_code ec;
        std::cout << "  " << dir.string() << (fs::is_directory(dir, ec) ? "" : "  (missing)") << "\n";
    }
    if (registry.records().empty()) {
        std::cout << "no plugins found (build them with tools/ddo build, or add --plugin-dir DIR)\n";
        return;
    }
    std::size_t name_w = 4, alias_w = 7;
    for (const PluginRecord & r : registry.records()) {
        name_w = std::max(name_w, r.name.size());
        alias_w = std::max(alias_w, join(r.aliases, ",").size());
    }
    const auto w = [](std::size_t n) { return static_cast<int>(n + 2); };
    std::cout << "\n"
              << std::left << std::setw(w(name_w)) << "NAME" << std::setw(11) << "KIND" << std::setw(10) << "VERSION"
              << std::setw(w(alias_w)) << "ALIASES" << std::setw(14) << "SHA256" << "STATUS\n";
    for (const PluginRecord & r : registry.records()) {
        const std::string aliases = r.aliases.empty() ? "-" : join(r.aliases, ",");
        const std::string sha = r.actual_sha256.empty() ? "-" : short_digest(r.actual_sha256);
        std::cout << std::left << std::setw(w(name_w)) << r.name << std::setw(11) << (r.kind.empty() ? "?" : r.kind)
                  << std::setw(10) << (r.version.empty() ? "-" : r.version) << std::setw(w(alias_w)) << aliases
                  << std::setw(14) << sha << status_text(r) << "\n"
                  << "    file: " << r.artifact.path.string() << "\n";
        if (r.status == PluginStatus::refused) std::cout << "    reason: " << r.refusal_reason << "\n";
        if (const auto it = facts.find(r.name); it != facts.end() && r.status != PluginStatus::refused) {
            std::cout << "    " << it->second.description << "\n"
                      << "    components: " << join(it->second.components, ", ") << "\n"
                      << "    options: " << (it->second.options.empty() ? "-" : join(it->second.options, ", ")) << "\n"
                      << "    takes: " << (it->second.pipelines.empty() ? "-" : join(it->second.pipelines, ", ")) << "\n";
        }
    }
}

void install(CLI::App & app, HostOptions & options) {
    auto args = std::make_shared<PluginsArgs>();

    auto * plugins = app.add_subcommand("plugins", "list plugins: name, kind, version, aliases, file, sha256, status");
    plugins->add_flag("--json", args->json, "print one JSON object instead of a table");
    plugins->add_option("--plugin-dir", args->only_dirs,
                        "list only these directories (repeatable) instead of the builtin one and DDO_PLUGIN_PATH");
    plugins->callback([args, &options] {
        PluginRegistry registry = PluginRegistry::discover(directories(options, *args));
        registry.probe_all();  // verify + negotiate each; refusals are recorded, not thrown
        const auto facts = model_facts(registry);
        std::size_t refused = 0;
        for (const auto & r : registry.records()) refused += r.status == PluginStatus::refused;
        if (args->json) {
            nlohmann::json out;
            out["directories"] = nlohmann::json::array();
            for (const auto & d : registry.dirs()) out["directories"].push_back(d.string());
            out["plugins"] = nlohmann::json::array();
            for (const auto & r : registry.records()) {
                auto j = to_json(r);
                if (const auto it = facts.find(r.name); it != facts.end() && r.status != PluginStatus::refused) {
                    j["description"] = it->second.description;
                    j["components"] = it->second.components;
                    j["supported_options"] = it->second.options;
                    j["pipeline_classes"] = it->second.pipelines;
                }
                out["plugins"].push_back(std::move(j));
            }
            out["refused"] = refused;
            std::cout << out.dump(2) << "\n";
        } else {
            print_table(registry, facts);
            if (refused > 0) std::cerr << refused << " plugin(s) refused (see the reasons above)\n";
        }
        // Like verify: a listing with a refused plugin is a verification failure (exit 3).
        options.exit_code = static_cast<int>(refused == 0 ? ExitCode::ok : ExitCode::verification);
    });

    auto * verify = app.add_subcommand(
        "verify", "hash every listed artifact against its artifacts.toml without loading any (exit 0 all verify, 3 not)");
    verify->add_option("--plugin-dir", args->only_dirs,
                       "verify only these directories (repeatable) instead of the builtin one and DDO_PLUGIN_PATH");
    verify->callback([args, &options] {
        PluginRegistry registry = PluginRegistry::discover(directories(options, *args));
        const bool all_ok = registry.verify_all();
        std::size_t ok = 0;
        for (const PluginRecord & r : registry.records()) {
            if (r.status == PluginStatus::refused) {
                std::cerr << "FAILED   " << r.artifact.name << ": " << to_string(r.refusal) << ": " << r.refusal_reason
                          << "\n";
            } else {
                ++ok;
                std::cout << "verified " << r.artifact.name << "  sha256 " << r.actual_sha256 << "  "
                          << r.artifact.path.string() << "\n";
            }
        }
        const std::size_t total = registry.records().size();
        if (total == 0) {
            std::cout << "no artifacts listed in " << join([&] {
                std::vector<std::string> d;
                for (const auto & p : registry.dirs()) d.push_back(p.string());
                return d;
            }(), ", ") << "; nothing to verify\n";
        } else {
            std::cout << ok << " of " << total << " artifact(s) verified\n";
        }
        if (!all_ok) {
            std::cerr << (total - ok) << " artifact(s) failed verification; rebuild (tools/ddo build) or fix the "
                      << "listed drop-in manifests\n";
        }
        options.exit_code = static_cast<int>(all_ok ? ExitCode::ok : ExitCode::verification);
    });
}

const RegisterCommand reg{20, install};

}  // namespace

}  // namespace ddo::host
