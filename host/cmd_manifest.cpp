// `ddo-host manifest add FILE.so [--dir DIR]`: writes (or updates) FILE's entry in DIR/artifacts.toml from the
// file itself — name, kind, fingerprint from its negotiate info (read in a child process: nothing of the plugin
// runs in this one), size and sha256 from the same descriptor — and prints the entry for review. A drop-in
// plugin directory is then `--plugin-dir DIR` (docs/architecture.md, "Writing a model plugin").
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include "command_registry.hpp"
#include "ddo/error.hpp"
#include "ddo/plugin/artifact_manifest.hpp"
#include "ddo/plugin/plugin_probe.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::host {
namespace {

namespace fs = std::filesystem;

struct ManifestArgs {
    std::string file;
    std::string dir;
};

std::string platform_name() {
    utsname u{};
    if (::uname(&u) != 0) return "linux-unknown";
    return std::string("linux-") + u.machine;  // as the build writes it: linux-${CMAKE_SYSTEM_PROCESSOR}
}

void add(const ManifestArgs & a, HostOptions & options) {
    std::error_code ec;
    const fs::path file = fs::weakly_canonical(fs::absolute(a.file), ec);
    if (ec || !fs::is_regular_file(file))
        throw UsageError("manifest add: " + a.file + " is not a regular file; give the plugin's .so");
    const fs::path dir = fs::weakly_canonical(fs::absolute(a.dir.empty() ? file.parent_path() : fs::path(a.dir)));
    const fs::path rel = file.lexically_relative(dir);
    if (rel.empty() || rel.is_absolute() || *rel.begin() == "..")
        throw UsageError("manifest add: " + file.string() + " is not inside " + dir.string() +
                         "; copy the plugin into the directory the manifest describes first");
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) throw UsageError("manifest add: cannot open " + file.string() + ": " + std::strerror(errno));
    const NegotiateInfo info = negotiate_in_child(fd.get(), file);
    if (info.kind != "model" && info.kind != "allocator")
        throw VerificationError(file.string() + ": negotiate says kind " + info.kind + "; a manifest lists model and "
                                "allocator plugins only");
    const FileDigest d = digest_fd(fd.get(), file);

    ArtifactEntry e;
    e.name = info.name;
    e.kind = info.kind;
    e.file = rel.string();
    e.size = d.size;
    e.sha256 = d.sha256;
    e.platform = platform_name();
    e.fingerprint = info.fingerprint;

    ArtifactManifest m;
    m.file = dir / kArtifactManifestFileName;
    m.schema_version = kArtifactManifestSchemaVersion;
    if (fs::exists(m.file)) m = read_artifact_manifest(m.file);  // refuses a broken manifest (exit 3) untouched
    bool replaced = false;
    for (auto & old : m.artifacts) {
        if (old.name == e.name || old.file == e.file) {
            if (replaced) continue;
            old = e;
            replaced = true;
        }
    }
    // A second entry of the same name or file would be a duplicate: keep only the updated one.
    std::vector<ArtifactEntry> kept;
    bool seen = false;
    for (auto & x : m.artifacts) {
        if (x.name == e.name || x.file == e.file) {
            if (seen) continue;
            seen = true;
        }
        kept.push_back(x);
    }
    m.artifacts = std::move(kept);
    if (!replaced) m.artifacts.push_back(e);
    write_artifact_manifest(m);
    std::cout << format_artifact_entry(e) << "\n"
              << (replaced ? "updated" : "added") << " '" << e.name << "' (" << e.kind << ", abi " << info.abi_major
              << "." << info.abi_minor << ", version " << info.version << ") in " << m.file.string() << " ("
              << m.artifacts.size() << " artifact(s)); review the entry, then run with --plugin-dir " << dir.string()
              << "\n";
    options.exit_code = static_cast<int>(ExitCode::ok);
}

void install(CLI::App & app, HostOptions & options) {
    auto a = std::make_shared<ManifestArgs>();
    auto * manifest = app.add_subcommand("manifest", "write artifact manifest entries for drop-in plugins");
    manifest->require_subcommand(1);
    auto * add_cmd = manifest->add_subcommand(
        "add", "negotiate with FILE.so in a child process and write its entry (name, kind, file, size, sha256, "
               "platform, fingerprint) into DIR/artifacts.toml; prints the entry");
    add_cmd->add_option("file", a->file, "the plugin shared library")->required();
    add_cmd->add_option("--dir", a->dir, "the plugin directory whose artifacts.toml to write (default: FILE's directory)");
    add_cmd->callback([a, &options] { add(*a, options); });
}

const RegisterCommand reg{25, install};

}  // namespace
}  // namespace ddo::host
