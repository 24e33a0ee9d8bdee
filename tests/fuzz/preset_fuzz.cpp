// Fuzz target: preset resolution (ddo/preset/preset_resolver.hpp): a TOML preset file, its `inherits` parents (the
// shipped presets/ directory), DDO_* environment values and --set key=value arguments, checked against the preset
// schema, with and without a model plugin's context (components, supported options, installed plugin names).
// Input: the preset file's text up to the first NUL byte; after it, one argument per line: "DDO_NAME=value" is an
// environment variable, anything else a --set argument. The preset is written to a scratch file per input (the
// resolver reads files: `inherits` names files next to it). An accepted resolution must be readable through every
// accessor the host and the engine use (routes, capacities, VAE strategy, plugin options, the report's JSON) and the
// step cache's reading of cache.* (StepCacheSettings::read: accepted or refused naming the key).
#include <filesystem>
#include <fstream>
#include <vector>

#include "ddo/preset/preset_resolver.hpp"
#include "ddo/preset/step_cache_settings.hpp"
#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;

fs::path g_scratch;  // a directory of this process: <TMPDIR>/ddo-fuzz-preset-<pid>
fs::path g_preset;   // g_scratch/fuzz.toml

void use(const ddo::ResolvedSettings & s) {
    for (const std::string & c : s.components()) {
        (void)ddo::to_string(s.route(c));
        (void)s.capacities(c);
    }
    (void)s.capacities();
    (void)s.vae_strategy();
    (void)s.plugin_options("ltx2_video");
    (void)s.to_json().dump();  // what the run report records
    // cache.* as a model run reads them (issue 41): accepted, or refused with ddo::Error naming the key.
    ddo::fuzz::accepted([&] { (void)ddo::StepCacheSettings::read(s).to_json().dump(); });
}

void resolve(ddo::ResolveRequest rq) {
    rq.platform = ddo::PlatformInfo{ddo::Platform::linux_native, "fuzz"};
    ddo::fuzz::accepted([&] { use(ddo::resolve_settings(rq)); });
    // The same with a plugin chosen: its components, its options and the installed plugins.
    rq.plugin_name = "ltx2_video";
    rq.plugin_components = std::vector<std::string>{"text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder"};
    rq.supported_options = std::vector<std::string>{"plugin.ltx2_video.stg_scale", "plugin.ltx2_video.stg_blocks",
                                                    "ltx2_video.max_sequence_length", "plugin.ltx2_video.guidance.*"};
    rq.known_plugins = std::vector<std::string>{"ltx2_video", "ltx2_image", "qwen_image_21", "linear", "vmm"};
    ddo::fuzz::accepted([&] { use(ddo::resolve_settings(rq)); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char * tmp = std::getenv("TMPDIR");
    g_scratch = fs::path(tmp && *tmp ? tmp : "/tmp") / ("ddo-fuzz-preset-" + std::to_string(::getpid()));
    fs::create_directories(g_scratch);
    g_preset = g_scratch / "fuzz.toml";
    std::atexit([] {
        std::error_code ec;
        fs::remove_all(g_scratch, ec);
    });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    const std::string_view in = ddo::fuzz::bytes(data, size);
    const std::size_t nul = in.find('\0');
    const std::string_view toml = in.substr(0, nul);
    {
        std::ofstream out(g_preset, std::ios::binary | std::ios::trunc);
        out.write(toml.data(), static_cast<std::streamsize>(toml.size()));
    }

    ddo::ResolveRequest rq;
    rq.preset_dirs = {fs::path(DDO_SOURCE_DIR) / "presets"};
    if (nul != std::string_view::npos) {
        std::string_view rest = in.substr(nul + 1);
        while (!rest.empty()) {
            const std::size_t nl = rest.find('\n');
            const std::string_view line = rest.substr(0, nl);
            rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
            const std::size_t eq = line.find('=');
            if (line.starts_with("DDO_") && eq != std::string_view::npos)
                rq.environment[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
            else
                rq.sets.emplace_back(line);
        }
    }
    // The arguments alone (built-in defaults), then with the preset file.
    resolve(rq);
    rq.preset = g_preset.string();
    resolve(rq);
    // The linter's walk, which collects every key's error instead of stopping at the first.
    ddo::fuzz::accepted([&] { (void)ddo::lint_preset_file(g_preset, rq.preset_dirs); });
    return 0;
}
