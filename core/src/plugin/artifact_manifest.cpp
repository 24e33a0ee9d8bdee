#include "ddo/plugin/artifact_manifest.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

#include "ddo/error.hpp"
#include "ddo/util/atomic_write.hpp"
#include "ddo/util/utf8_text.hpp"

namespace ddo {

namespace fs = std::filesystem;

namespace {

constexpr std::array<std::string_view, 7> kArtifactKeys = {"name", "kind", "file", "size", "sha256", "platform",
                                                           "fingerprint"};
constexpr std::string_view kNextStep =
    "rebuild (tools/ddo build) to rewrite a build manifest, or fix this drop-in manifest "
    "(format: docs/architecture.md, Note [Artifact manifest])";

std::string where(const fs::path & file, const toml::source_region & region) {
    std::ostringstream out;
    out << file.string();
    if (region.begin.line != 0) out << ':' << region.begin.line << ':' << region.begin.column;
    return out.str();
}

[[noreturn]] void refuse(const fs::path & file, const toml::source_region & region, const std::string & what) {
    throw VerificationError("artifact manifest " + where(file, region) + ": " + what + "; " + std::string(kNextStep));
}

std::string required_string(const fs::path & file, const toml::table & artifact, std::string_view key) {
    const toml::node * node = artifact.get(key);
    if (node == nullptr) refuse(file, artifact.source(), "[[artifact]] has no '" + std::string(key) + "' key");
    if (!node->is_string()) {
        std::ostringstream found;
        found << node->type();
        refuse(file, node->source(), "'" + std::string(key) + "' must be a string, found " + found.str());
    }
    return node->as_string()->get();
}

bool is_lower_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The checks of read_artifact_manifest on a parsed document.
ArtifactManifest validate_manifest(const toml::table & root, const fs::path & manifest_file) {
    ArtifactManifest manifest;
    manifest.file = manifest_file;
    const fs::path dir = manifest_file.parent_path();

    for (const auto & [key, node] : root) {
        if (key != "schema_version" && key != "artifact")
            refuse(manifest_file, node.source(),
                   "unknown top-level key '" + std::string(key.str()) + "' (expected schema_version and [[artifact]])");
    }
    const toml::node * version = root.get("schema_version");
    if (version == nullptr) refuse(manifest_file, root.source(), "missing 'schema_version = 1'");
    if (!version->is_integer() || version->as_integer()->get() != kArtifactManifestSchemaVersion) {
        std::ostringstream found;
        if (version->is_integer())
            found << version->as_integer()->get();
        else
            found << "a " << version->type();
        refuse(manifest_file, version->source(), "schema_version must be 1, found " + found.str());
    }
    manifest.schema_version = kArtifactManifestSchemaVersion;

    const toml::node * list = root.get("artifact");
    if (list == nullptr) return manifest;  // a directory with nothing to offer is valid
    const toml::array * artifacts = list->as_array();
    if (artifacts == nullptr) refuse(manifest_file, list->source(), "'artifact' must be an array of tables ([[artifact]])");

    for (const toml::node & item : *artifacts) {
        const toml::table * table = item.as_table();
        if (table == nullptr) refuse(manifest_file, item.source(), "each [[artifact]] must be a table");
        for (const auto & [key, node] : *table) {
            if (std::find(kArtifactKeys.begin(), kArtifactKeys.end(), key.str()) == kArtifactKeys.end())
                refuse(manifest_file, node.source(),
                       "unknown [[artifact]] key '" + std::string(key.str()) +
                           "' (expected name, kind, file, size, sha256, platform, fingerprint)");
        }
        ArtifactEntry entry;
        entry.manifest = manifest_file;
        entry.name = required_string(manifest_file, *table, "name");
        entry.kind = required_string(manifest_file, *table, "kind");
        entry.file = required_string(manifest_file, *table, "file");
        entry.sha256 = required_string(manifest_file, *table, "sha256");
        entry.platform = required_string(manifest_file, *table, "platform");
        entry.fingerprint = required_string(manifest_file, *table, "fingerprint");
        const toml::node * size = table->get("size");
        if (size == nullptr) refuse(manifest_file, table->source(), "[[artifact]] has no 'size' key");
        if (!size->is_integer() || size->as_integer()->get() < 0)
            refuse(manifest_file, size->source(), "'size' must be a non-negative integer (bytes)");
        entry.size = static_cast<std::uint64_t>(size->as_integer()->get());

        if (entry.name.empty()) refuse(manifest_file, table->source(), "'name' must not be empty");
        if (entry.kind != "model" && entry.kind != "allocator")
            refuse(manifest_file, table->get("kind")->source(),
                   "'kind' must be \"model\" or \"allocator\", found \"" + entry.kind + "\"");
        if (entry.sha256.size() != 64 || !is_lower_hex(entry.sha256))
            refuse(manifest_file, table->get("sha256")->source(),
                   "'sha256' must be 64 lowercase hex digits, found \"" + entry.sha256 + "\"");
        const fs::path rel(entry.file);
        const bool escapes = std::any_of(rel.begin(), rel.end(), [](const fs::path & part) { return part == ".."; });
        if (entry.file.empty() || rel.is_absolute() || escapes)
            refuse(manifest_file, table->get("file")->source(),
                   "'file' must be a path relative to the manifest's directory without '..', found \"" + entry.file +
                       "\"");
        entry.path = (dir / rel).lexically_normal();
        manifest.artifacts.push_back(std::move(entry));
    }
    return manifest;
}

}  // namespace

ArtifactManifest read_artifact_manifest(const fs::path & manifest_file) {
    std::ifstream in(manifest_file, std::ios::binary);
    if (!in)
        throw VerificationError("artifact manifest " + manifest_file.string() + ": cannot open it (" + std::strerror(errno) +
                                "); " + std::string(kNextStep));
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    return parse_artifact_manifest(text, manifest_file);
}

ArtifactManifest parse_artifact_manifest(std::string_view toml_text, const fs::path & manifest_file) {
    // UTF-8 first: toml++ 3.3 is not safe on every invalid byte sequence (issue 16).
    if (const auto bad = first_invalid_utf8(toml_text))
        throw VerificationError("artifact manifest " + manifest_file.string() + ":" + std::to_string(bad->line) + ":" +
                                std::to_string(bad->column) + ": not UTF-8 (byte " + std::to_string(bad->offset) + "); " +
                                std::string(kNextStep));
    toml::table root;
    try {
        root = toml::parse(toml_text, manifest_file.string());
    } catch (const toml::parse_error & e) {
        refuse(manifest_file, e.source(), "not valid TOML: " + std::string(e.description()));
    }
    return validate_manifest(root, manifest_file);
}

namespace {

toml::table entry_table(const ArtifactEntry & e) {
    return toml::table{{"name", e.name},         {"kind", e.kind},         {"file", e.file},
                       {"size", int64_t(e.size)}, {"sha256", e.sha256},     {"platform", e.platform},
                       {"fingerprint", e.fingerprint}};
}

// toml++ prints a table's keys sorted; the manifest's order is name, kind, file, size, sha256, platform,
// fingerprint (kArtifactKeys), so each key is formatted on its own. Every string is written as a basic "..."
// string with escapes: toml++ 3.3's multi-line spelling of a value that starts with a newline ('''<newline>
// <newline>...) reads back one character short, since TOML drops a newline right after the opening quotes, and its
// literal '...' spelling keeps control characters that TOML forbids there (both found by the artifact_manifest
// fuzz target).
std::string entry_text(const ArtifactEntry & e) {
    const toml::table t = entry_table(e);
    constexpr toml::format_flags kFlags =
        toml::toml_formatter::default_flags &
        ~(toml::format_flags::allow_multi_line_strings | toml::format_flags::allow_literal_strings);
    std::ostringstream out;
    out << "[[artifact]]\n";
    for (std::string_view key : kArtifactKeys) {
        toml::table one;
        one.insert(key, *t.get(key));
        out << toml::toml_formatter{one, kFlags} << "\n";
    }
    return out.str();
}

}  // namespace

std::string format_artifact_entry(const ArtifactEntry & entry) { return entry_text(entry); }

void write_artifact_manifest(const ArtifactManifest & m) {
    std::ostringstream out;
    out << "# Each [[artifact]] is verified before load (docs/architecture.md, Note [Artifact manifest]).\n";
    out << "schema_version = " << kArtifactManifestSchemaVersion << "\n";
    for (const auto & a : m.artifacts) out << "\n" << entry_text(a);
    write_text_atomically(m.file, out.str(), "artifact manifest");
}

}  // namespace ddo
