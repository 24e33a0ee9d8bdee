#include "plugin_library.hpp"

#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>
#include <deque>
#include <mutex>

namespace ddo::detail {

namespace {

// Note [Plugin unloading]: the loaded libraries and their descriptors are intentionally never
// released. The containers are heap-allocated and never destroyed, so no static destructor runs
// dlclose at exit either.
struct LoadedLibraries {
    std::mutex mutex;
    std::deque<boost::dll::shared_library> libraries;
    std::deque<int> descriptors;
};

LoadedLibraries & loaded_libraries() {
    static auto * all = new LoadedLibraries();
    return *all;
}

}  // namespace

PluginLibrary load_plugin_library(UniqueFd fd, const std::filesystem::path & file) {
    PluginLibrary out;
    const std::string proc_path = "/proc/self/fd/" + std::to_string(fd.get());

    boost::dll::shared_library library;
    boost::dll::fs::error_code ec;
    library.load(proc_path, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    if (ec || !library.is_loaded()) {
        const char * dl = ::dlerror();
        std::string detail = dl != nullptr ? dl : ec.message();
        out.refusal = RefusalKind::load_failed;
        out.reason = "plugin '" + file.string() + "' could not be loaded (dlopen of the verified descriptor " +
                     proc_path + " failed: " + detail +
                     "); check its dependencies with 'ldd " + file.string() + "' and rebuild it";
        return out;  // fd closes: nothing was mapped, so its number may be reused
    }

    // From here on the object is mapped: keep library and descriptor for the process lifetime.
    const bool has_negotiate = library.has(DDO_PLUGIN_NEGOTIATE_SYMBOL);
    const bool has_get_vtable = library.has(DDO_PLUGIN_GET_VTABLE_SYMBOL);
    if (has_negotiate) out.negotiate = library.get<std::remove_pointer_t<ddo_plugin_negotiate_fn>>(DDO_PLUGIN_NEGOTIATE_SYMBOL);
    if (has_get_vtable)
        out.get_vtable = library.get<std::remove_pointer_t<ddo_plugin_get_vtable_fn>>(DDO_PLUGIN_GET_VTABLE_SYMBOL);
    {
        auto & all = loaded_libraries();
        std::lock_guard lock(all.mutex);
        all.libraries.push_back(std::move(library));
        all.descriptors.push_back(fd.release());
    }
    if (!has_negotiate || !has_get_vtable) {
        std::string missing = !has_negotiate ? DDO_PLUGIN_NEGOTIATE_SYMBOL : DDO_PLUGIN_GET_VTABLE_SYMBOL;
        if (!has_negotiate && !has_get_vtable) missing += std::string(" and ") + DDO_PLUGIN_GET_VTABLE_SYMBOL;
        out.refusal = RefusalKind::missing_symbol;
        out.reason = "plugin '" + file.string() + "' does not export " + missing +
                     " (expected both ddo_plugin_negotiate and ddo_plugin_get_vtable); build it with "
                     "ddo_add_plugin() so cmake/plugin_exports.map exports the entry points";
        out.negotiate = nullptr;
        out.get_vtable = nullptr;
    }
    return out;
}

}  // namespace ddo::detail
