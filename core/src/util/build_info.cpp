#include "ddo/util/build_info.hpp"

#include "ddo/build_info.h"

namespace ddo {

const BuildInfo & build_info() {
    static const BuildInfo info{DDO_VERSION_STRING, DDO_GIT_REVISION, DDO_BUILD_FINGERPRINT, DDO_TORCH_VERSION,
                                DDO_CUDA_VERSION,   DDO_COMPILER,     DDO_BUILD_TYPE};
    return info;
}

}  // namespace ddo
