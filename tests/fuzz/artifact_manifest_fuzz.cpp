// Fuzz target: the artifact manifest reader (parse_artifact_manifest, the checks of read_artifact_manifest on the
// text of an artifacts.toml; ddo/plugin/artifact_manifest.hpp). The input is the manifest's text. A manifest is
// trusted only after these checks (Note [Artifact manifest] in docs/architecture.md), so an accepted one must hold
// what the checks promise: every `file` stays inside the manifest's directory, sha256 is 64 lowercase hex digits,
// kind is model | allocator. And the writer's spelling of every accepted entry (format_artifact_entry, what
// write_artifact_manifest writes) must read back to the same entry.
#include <algorithm>

#include "ddo/plugin/artifact_manifest.hpp"
#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path kManifest = "/fuzz/plugins/artifacts.toml";

bool inside(const fs::path & dir, const fs::path & p) {
    auto d = dir.begin(), q = p.begin();
    for (; d != dir.end(); ++d, ++q)
        if (q == p.end() || *d != *q) return false;
    return true;
}

void check(const ddo::ArtifactManifest & m) {
    DDO_FUZZ_CHECK(m.schema_version == ddo::kArtifactManifestSchemaVersion);
    std::string rewritten = "schema_version = 1\n";
    for (const ddo::ArtifactEntry & e : m.artifacts) {
        DDO_FUZZ_CHECK(!e.name.empty());
        DDO_FUZZ_CHECK(e.kind == "model" || e.kind == "allocator");
        DDO_FUZZ_CHECK(e.sha256.size() == 64 && std::all_of(e.sha256.begin(), e.sha256.end(), [](char c) {
                           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                       }));
        DDO_FUZZ_CHECK(e.manifest == kManifest);
        DDO_FUZZ_CHECK(inside(kManifest.parent_path(), e.path));
        DDO_FUZZ_CHECK(std::none_of(e.path.begin(), e.path.end(), [](const fs::path & part) { return part == ".."; }));
        rewritten += "\n" + ddo::format_artifact_entry(e);
    }
    // Round trip: what the writer writes, the reader reads back unchanged.
    ddo::ArtifactManifest again;
    try {
        again = ddo::parse_artifact_manifest(rewritten, kManifest);
    } catch (const ddo::Error & e) {
        std::fprintf(stderr, "ddo fuzz: the written manifest is refused: %s\n--- written:\n%s\n", e.what(), rewritten.c_str());
        std::abort();
    }
    DDO_FUZZ_CHECK(again.artifacts.size() == m.artifacts.size());
    for (std::size_t i = 0; i < m.artifacts.size(); ++i) {
        const ddo::ArtifactEntry & a = m.artifacts[i], & b = again.artifacts[i];
        DDO_FUZZ_CHECK(a.name == b.name && a.kind == b.kind && a.file == b.file && a.size == b.size &&
                       a.sha256 == b.sha256 && a.platform == b.platform && a.fingerprint == b.fingerprint &&
                       a.path == b.path);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    const std::string_view text = ddo::fuzz::bytes(data, size);
    ddo::fuzz::accepted([&] { check(ddo::parse_artifact_manifest(text, kManifest)); });
    return 0;
}
