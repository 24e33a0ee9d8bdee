// Identity of this build: version, git revision, fingerprint (the string every plugin must match).
#pragma once

#include <string>

namespace ddo {

struct BuildInfo {
    std::string version;
    std::string git_revision;
    std::string fingerprint;   // "core=..;torch=..;cuda=..;cc=.."
    std::string torch_version; // "none" when built without LibTorch
    std::string cuda_version;  // CUDA toolkit the build compiled against, "none" if absent
    std::string compiler;
    std::string build_type;
};

const BuildInfo & build_info();

}  // namespace ddo
