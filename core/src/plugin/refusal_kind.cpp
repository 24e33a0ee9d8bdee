#include "ddo/plugin/plugin_registry.hpp"

namespace ddo {

const char * to_string(RefusalKind kind) {
    switch (kind) {
        case RefusalKind::none: return "none";
        case RefusalKind::digest_mismatch: return "digest_mismatch";
        case RefusalKind::no_manifest_entry: return "no_manifest_entry";
        case RefusalKind::abi_major_mismatch: return "abi_major_mismatch";
        case RefusalKind::fingerprint_mismatch: return "fingerprint_mismatch";
        case RefusalKind::missing_symbol: return "missing_symbol";
        case RefusalKind::plugin_threw: return "plugin_threw";
        case RefusalKind::duplicate_name: return "duplicate_name";
        case RefusalKind::unsafe_file: return "unsafe_file";
        case RefusalKind::open_failed: return "open_failed";
        case RefusalKind::load_failed: return "load_failed";
        case RefusalKind::kind_mismatch: return "kind_mismatch";
        case RefusalKind::platform_mismatch: return "platform_mismatch";
    }
    return "unknown";
}

}  // namespace ddo
