// Verification of one artifact before anything loads it, TOCTOU-safe: the file is opened once,
// without following links, checked and hashed through that descriptor; the loader then maps the
// same descriptor (/proc/self/fd/N). Order: docs/architecture.md, "Artifact manifest, verification
// and loading order".
#pragma once

#include <string>

#include "ddo/util/file_digest.hpp"
#include "ddo/plugin/plugin_registry.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo {

struct ArtifactVerdict {
    RefusalKind refusal = RefusalKind::none;
    std::string reason;  // full message when refused: file, expected vs found, next step
    FileDigest digest;   // filled once hashing ran (also for a digest mismatch)
    UniqueFd fd;         // the verified, open descriptor (only when refusal == none)
    // With sealed_copy: fd is a memfd holding exactly the bytes hashed, sealed against every change
    // (F_SEAL_WRITE|SHRINK|GROW|SEAL), so rewriting the file in place cannot change what is loaded. When the kernel
    // gives no sealed memfd, fd is the file's descriptor (the residual gap) and seal_reason says why.
    bool sealed = false;
    std::string seal_reason;
    double seal_s = 0;   // time of the copy (with the hashing it shares a pass with)

    bool ok() const noexcept { return refusal == RefusalKind::none; }
};

// Opens artifact.path beneath its manifest directory (O_NOFOLLOW|O_CLOEXEC; openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the kernel has it), requires a regular file owned by
// us or root without group/world write bits, hashes it from the descriptor and compares size,
// SHA-256, platform and build fingerprint with the manifest entry. Never throws for a refusal.
ArtifactVerdict verify_artifact(const ArtifactEntry & artifact, bool sealed_copy = false);

// "linux-<machine>", the platform string the build writes into manifests.
std::string host_platform();

// A file mode's permission bits as refusals print them ("0775").
std::string mode_string(unsigned mode);

}  // namespace ddo
