// ddo-vmm-probe [--backend host|cuda] [--library PATH] [--plugin-dir DIR]
// Runs the VMM gate (vmm_gate.hpp) against the vmm allocator plugin and prints one JSON document.
// Default: the plugin is verified and loaded by ddo::PluginRegistry from <exe>/../lib/ddo/plugins.
// --library PATH loads that file directly with dlopen (not verified; for an installed or foreign
// build), which also lets the probe print the plugin's refusal reasons.
// Exit: 0 every check passed, 1 a check failed, 2 usage error, 3 the plugin could not be loaded,
// 4 the requested backend is unavailable here (e.g. --backend cuda without a driver or device).
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "ddo/error.hpp"
#include "ddo/plugin/plugin_registry.hpp"
#include "vmm_gate.hpp"

#if DDO_HAVE_CUDA_HEADERS
#include "ddo/platform/cuda_driver.hpp"
#endif

namespace {

std::string g_last_error;
void record_error(void *, int32_t, const char * msg) { g_last_error = msg != nullptr ? msg : ""; }
void drop_log(void *, int32_t, const char *, const char *) {}
const ddo_host_api kProbeHost{sizeof(ddo_host_api), DDO_ABI_VERSION_MINOR, nullptr, drop_log, record_error};

std::filesystem::path exe_dir() {
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::filesystem::current_path() : p.parent_path();
}

int usage(const std::string & why) {
    std::cerr << "ddo-vmm-probe: " << why << "\n"
              << "usage: ddo-vmm-probe [--backend host|cuda] [--library PATH] [--plugin-dir DIR]\n";
    return 2;
}

int fail_load(nlohmann::json out, const std::string & why) {
    out["passed"] = false;
    out["load_error"] = why;
    std::cout << out.dump(2) << std::endl;
    return 3;
}

}  // namespace

int main(int argc, char ** argv) {
    std::string backend = "host";
    std::string library;
    std::filesystem::path plugin_dir = exe_dir() / DDO_DEFAULT_PLUGIN_DIR_REL;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](std::string * out) {
            if (i + 1 >= argc) {
                return false;
            }
            *out = argv[++i];
            return true;
        };
        std::string v;
        if (arg == "--backend" && value(&backend)) {
        } else if (arg == "--library" && value(&library)) {
        } else if (arg == "--plugin-dir" && value(&v)) {
            plugin_dir = v;
        } else if (arg == "-h" || arg == "--help") {
            usage("runs the VMM execution-slot gate and prints JSON");
            return 0;
        } else {
            return usage("unknown or incomplete argument '" + arg + "'");
        }
    }
    {
        std::error_code ec;  // the registry compares paths lexically: no "bin/.." in them
        const auto canonical = std::filesystem::weakly_canonical(plugin_dir, ec);
        plugin_dir = ec ? plugin_dir.lexically_normal() : canonical;
    }
    if (backend != "host" && backend != "cuda") {
        return usage("--backend must be host or cuda, got '" + backend + "'");
    }
    nlohmann::json out = {{"tool", "ddo-vmm-probe"}, {"backend_requested", backend}};
    ddo::probe::GateInput input;
    input.backend = backend == "cuda" ? DDO_ALLOC_BACKEND_CUDA : DDO_ALLOC_BACKEND_HOST;

    if (!library.empty()) {
        out["loader"] = "dlopen";
        out["verified"] = false;
        out["library"] = library;
        void * handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed (process lifetime)
        if (handle == nullptr) {
            const char * err = dlerror();
            return fail_load(out, std::string("dlopen failed: ") + (err ? err : "unknown"));
        }
        auto get_vtable = reinterpret_cast<ddo_plugin_get_vtable_fn>(dlsym(handle, DDO_PLUGIN_GET_VTABLE_SYMBOL));
        if (get_vtable == nullptr) {
            return fail_load(out, std::string(library) + " does not export " + DDO_PLUGIN_GET_VTABLE_SYMBOL);
        }
        input.vt = static_cast<const ddo_allocator_vtable *>(get_vtable(&kProbeHost));
        input.last_error = [] { std::string e = g_last_error; g_last_error.clear(); return e; };
    } else {
        out["loader"] = "registry";
        out["plugin_dir"] = plugin_dir.string();
        try {
            static auto registry = ddo::PluginRegistry::discover({plugin_dir});
            const ddo::LoadedPlugin & loaded = registry.load("vmm", "allocator");
            out["verified"] = true;
            out["library"] = loaded.record.artifact.path.string();
            out["sha256"] = loaded.record.actual_sha256;
            input.vt = loaded.allocator;
        } catch (const std::exception & e) {
            return fail_load(out, e.what());
        }
    }
    if (input.vt == nullptr) {
        return fail_load(out, "the plugin returned no allocator vtable");
    }
#if DDO_HAVE_CUDA_HEADERS
    if (input.backend == DDO_ALLOC_BACKEND_CUDA) {
        std::string why;
        const auto * driver = ddo::platform::CudaDriver::get(&why);
        out["cuda_driver"] = driver ? nlohmann::json{{"version", driver->driver_version()}} : nlohmann::json{{"unavailable", why}};
    }
#endif
    nlohmann::json gate = ddo::probe::run_vmm_gate(input);
    out.update(gate);
    std::cout << out.dump(2) << std::endl;
    if (out["passed"].get<bool>()) {
        return 0;
    }
    const auto & first = out["checks"].front();
    const bool unavailable = first["name"] == "pool_create" && first["detail"].get<std::string>().rfind("UNAVAILABLE", 0) == 0;
    return unavailable ? 4 : 1;
}
