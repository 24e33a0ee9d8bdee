// Maps a verified descriptor with Boost.DLL and resolves the two entry points. Internal to the
// loader (core/src/plugin). Libraries and their descriptors are kept for the whole process:
// see Note [Plugin unloading] in docs/architecture.md.
#pragma once

#include <filesystem>
#include <string>

#include "ddo/ddo_plugin_abi.h"
#include "ddo/plugin/plugin_registry.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::detail {

struct PluginLibrary {
    RefusalKind refusal = RefusalKind::none;
    std::string reason;
    ddo_plugin_negotiate_fn negotiate = nullptr;
    ddo_plugin_get_vtable_fn get_vtable = nullptr;
};

// Loads /proc/self/fd/<fd> with RTLD_NOW|RTLD_LOCAL. Takes the descriptor: on success it stays
// open for the life of the process (its number names the mapped object), on failure it is closed.
// Refuses with load_failed (dlopen error text) or missing_symbol (names the absent entry point).
PluginLibrary load_plugin_library(UniqueFd fd, const std::filesystem::path & file);

}  // namespace ddo::detail
