#include "ddo/util/status_name.hpp"

namespace ddo {

const char * status_name(ddo_status status) noexcept {
    switch (status) {
        case DDO_STATUS_OK: return "OK";
        case DDO_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case DDO_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
        case DDO_STATUS_UNSUPPORTED: return "UNSUPPORTED";
        case DDO_STATUS_BUSY: return "BUSY";
        case DDO_STATUS_UNAVAILABLE: return "UNAVAILABLE";
        case DDO_STATUS_INTERNAL: return "INTERNAL";
        case DDO_STATUS_INTERRUPTED: return "INTERRUPTED";
    }
    return "UNKNOWN";
}

}  // namespace ddo
