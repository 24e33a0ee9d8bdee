#include "ddo/plugin/plugin_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>

#include "ddo/error.hpp"
#include "ddo/plugin/artifact_manifest.hpp"
#include "ddo/plugin/artifact_verify.hpp"
#include "ddo/plugin/plugin_host_api.hpp"
#include "ddo/util/build_info.hpp"
#include "plugin_library.hpp"

namespace ddo {

namespace fs = std::filesystem;

namespace {

const char * kind_name(std::uint32_t kind) {
    switch (kind) {
        case DDO_PLUGIN_KIND_MODEL: return "model";
        case DDO_PLUGIN_KIND_ALLOCATOR: return "allocator";
        default: return nullptr;
    }
}

// "libddo_model_foo.so" -> "foo": the name ddo_add_plugin() gives a file, used for files that have
// no manifest entry so that asking for them by name explains the refusal.
std::string name_from_file(const fs::path & file) {
    std::string stem = file.stem().string();
    for (const char * prefix : {"libddo_model_", "libddo_allocator_", "lib"}) {
        if (stem.rfind(prefix, 0) == 0) return stem.substr(std::char_traits<char>::length(prefix));
    }
    return stem;
}

bool is_shared_object(const fs::directory_entry & entry) {
    const std::string name = entry.path().filename().string();
    return name.size() > 3 && (name.ends_with(".so") || name.find(".so.") != std::string::npos);
}

std::string describe(const PluginRecord & r) { return "'" + r.artifact.name + "' (" + r.artifact.path.string() + ")"; }

// Why a plugin directory cannot be trusted, or "" (issue 16 item 6; Note [Artifact manifest]): the directory and
// every directory above it must be changeable only by us or root — no group/world write bit unless sticky (/tmp),
// owned by us or root — and its manifest must be a regular file (not a symbolic link) with the same rule. Whoever
// can write any of them can swap the manifest or the files it lists.
std::string untrusted_directory_reason(const fs::path & dir, const fs::path & manifest, bool has_manifest) {
    std::error_code ec;
    fs::path p = fs::absolute(dir, ec).lexically_normal();
    if (ec) return "cannot resolve the path: " + ec.message();
    const uid_t me = ::geteuid();
    for (;;) {
        struct stat st{};
        if (::stat(p.c_str(), &st) != 0) return "cannot stat '" + p.string() + "': " + std::strerror(errno);
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
            return "'" + p.string() + "' is group/world-writable (mode " + mode_string(st.st_mode) + "); run 'chmod go-w " +
                   p.string() + "' or move the plugins elsewhere";
        if (st.st_uid != me && st.st_uid != 0)
            return "'" + p.string() + "' is owned by uid " + std::to_string(st.st_uid) + ", expected uid " +
                   std::to_string(me) + " or root";
        if (!p.has_parent_path() || p.parent_path() == p) break;
        p = p.parent_path();
    }
    if (!has_manifest) return "";
    struct stat st{};
    if (::lstat(manifest.c_str(), &st) != 0) return "cannot stat '" + manifest.string() + "': " + std::strerror(errno);
    if (S_ISLNK(st.st_mode))
        return "its manifest '" + manifest.string() + "' is a symbolic link; copy the real file into the directory";
    if (!S_ISREG(st.st_mode)) return "its manifest '" + manifest.string() + "' is not a regular file";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return "its manifest '" + manifest.string() + "' is group/world-writable (mode " + mode_string(st.st_mode) +
               "); run 'chmod go-w " + manifest.string() + "'";
    if (st.st_uid != me && st.st_uid != 0)
        return "its manifest '" + manifest.string() + "' is owned by uid " + std::to_string(st.st_uid) + ", expected uid " +
               std::to_string(me) + " or root";
    return "";
}

}  // namespace

struct PluginRegistry::Impl {
    struct Slot {
        bool negotiated = false;
        ddo_plugin_get_vtable_fn get_vtable = nullptr;
        std::unique_ptr<LoadedPlugin> loaded;  // stable address for load()'s callers
    };

    std::vector<fs::path> dirs;
    std::vector<std::pair<fs::path, std::string>> skipped;  // untrusted directories, with the reason
    std::vector<PluginRecord> records;
    std::vector<Slot> slots;

    bool refuse(std::size_t i, RefusalKind kind, std::string reason) {
        PluginRecord & r = records[i];
        r.status = PluginStatus::refused;
        r.refusal = kind;
        r.refusal_reason = std::move(reason);
        spdlog::debug("loader: refused {}: {}: {}", r.artifact.path.string(), to_string(kind), r.refusal_reason);
        return false;
    }

    // Hash only; nothing is loaded. Returns true when the artifact verifies.
    bool verify(std::size_t i) {
        PluginRecord & r = records[i];
        if (r.status == PluginStatus::refused) return false;
        if (r.status == PluginStatus::loaded || slots[i].negotiated) return true;  // already verified and mapped
        ArtifactVerdict verdict = verify_artifact(r.artifact);
        r.actual_sha256 = verdict.digest.sha256;
        r.xxh3_128 = verdict.digest.xxh3_128;
        if (!verdict.ok()) return refuse(i, verdict.refusal, std::move(verdict.reason));
        r.status = PluginStatus::verified;
        return true;
    }

    // Verify, map the verified descriptor, negotiate. No plugin code beyond negotiate runs.
    bool negotiate(std::size_t i) {
        PluginRecord & r = records[i];
        if (r.status == PluginStatus::refused) return false;
        if (slots[i].negotiated) return true;

        ArtifactVerdict verdict = verify_artifact(r.artifact, /*sealed_copy=*/true);
        r.actual_sha256 = verdict.digest.sha256;
        r.xxh3_128 = verdict.digest.xxh3_128;
        if (!verdict.ok()) return refuse(i, verdict.refusal, std::move(verdict.reason));
        r.sealed = verdict.sealed;
        r.seal_reason = verdict.seal_reason;
        r.seal_s = verdict.seal_s;
        if (!verdict.sealed)
            spdlog::warn("loader: {} is mapped from its file, not a sealed copy ({}): an in-place rewrite could change it",
                         r.artifact.path.string(), verdict.seal_reason);

        detail::PluginLibrary library = detail::load_plugin_library(std::move(verdict.fd), r.artifact.path);
        if (library.refusal != RefusalKind::none) return refuse(i, library.refusal, std::move(library.reason));

        const std::string file = r.artifact.path.string();
        ddo_plugin_info info{};
        info.struct_size = sizeof(ddo_plugin_info);
        const ddo_status status = library.negotiate(DDO_ABI_VERSION_MAJOR, DDO_ABI_VERSION_MINOR, &info);
        if (status != DDO_STATUS_OK)
            return refuse(i, status == DDO_STATUS_INTERNAL ? RefusalKind::plugin_threw : RefusalKind::load_failed,
                          "plugin '" + file + "': ddo_plugin_negotiate failed with status " +
                              std::to_string(static_cast<int>(status)) + " (expected DDO_STATUS_OK); fix or remove the plugin");
        if (info.abi_major != DDO_ABI_VERSION_MAJOR)
            return refuse(i, RefusalKind::abi_major_mismatch,
                          "plugin '" + file + "': ABI major mismatch (expected " + std::to_string(DDO_ABI_VERSION_MAJOR) +
                              ", found " + std::to_string(info.abi_major) + "; plugin ABI " +
                              std::to_string(info.abi_major) + "." + std::to_string(info.abi_minor) + ", host ABI " +
                              std::to_string(DDO_ABI_VERSION_MAJOR) + "." + std::to_string(DDO_ABI_VERSION_MINOR) +
                              "); rebuild the plugin against this ddo's core/include/ddo headers");
        const std::string & host_fingerprint = build_info().fingerprint;
        const std::string plugin_fingerprint = info.build_fingerprint != nullptr ? info.build_fingerprint : "(none)";
        if (plugin_fingerprint != host_fingerprint)
            return refuse(i, RefusalKind::fingerprint_mismatch,
                          "plugin '" + file + "': build fingerprint mismatch (expected '" + host_fingerprint +
                              "', found '" + plugin_fingerprint +
                              "'); rebuild the plugin together with this host (tools/ddo build)");
        const char * kind = kind_name(info.kind);
        if (kind == nullptr || r.artifact.kind != kind)
            return refuse(i, RefusalKind::kind_mismatch,
                          "plugin '" + file + "' reports kind " +
                              (kind != nullptr ? std::string(kind) : std::to_string(info.kind)) + " but its entry in '" +
                              r.artifact.manifest.string() + "' says '" + r.artifact.kind +
                              "'; fix the manifest entry or the plugin");
        const std::string name = info.name != nullptr ? info.name : "";
        if (name != r.artifact.name)
            return refuse(i, RefusalKind::no_manifest_entry,
                          "plugin '" + file + "' calls itself '" + name + "' but its entry in '" +
                              r.artifact.manifest.string() + "' is named '" + r.artifact.name +
                              "'; the manifest has no entry for '" + name + "': fix the entry or the plugin");

        r.name = name;
        r.kind = kind;
        r.version = info.version != nullptr ? info.version : "";
        r.fingerprint = plugin_fingerprint;
        r.abi_major = info.abi_major;
        r.abi_minor = info.abi_minor;
        r.aliases.clear();
        for (const char * const * a = info.aliases; a != nullptr && *a != nullptr; ++a) r.aliases.emplace_back(*a);
        r.status = PluginStatus::verified;
        slots[i].negotiated = true;
        slots[i].get_vtable = library.get_vtable;
        return true;
    }

    // negotiate + get_vtable. Throws VerificationError with the refusal.
    const LoadedPlugin & fetch(std::size_t i) {
        if (slots[i].loaded) return *slots[i].loaded;
        if (!negotiate(i)) throw VerificationError(records[i].refusal_reason);
        PluginRecord & r = records[i];
        const std::string file = r.artifact.path.string();

        PluginHostContext & host = PluginHostContext::create(r.name);
        const void * table = slots[i].get_vtable(host.api());
        if (table == nullptr) {
            const std::string message = host.last_error();
            refuse(i, RefusalKind::plugin_threw,
                   "plugin '" + r.name + "' (" + file + "): ddo_plugin_get_vtable failed: " +
                       (message.empty() ? std::string("it returned no vtable and reported no reason") : message) +
                       " (status " + std::to_string(host.last_status()) +
                       "); see the plugin's log lines above, fix the plugin or remove it from the plugin directory");
            throw VerificationError(r.refusal_reason);
        }
        auto loaded = std::make_unique<LoadedPlugin>();
        // Every vtable starts with {uint32_t struct_size; uint32_t abi_minor;}.
        const auto struct_size = *static_cast<const std::uint32_t *>(table);
        auto too_small = [&](std::size_t needed, const char * what) {
            refuse(i, RefusalKind::load_failed,
                   "plugin '" + r.name + "' (" + file + "): its " + what + " vtable is incomplete (struct_size " +
                       std::to_string(struct_size) + ", expected at least " + std::to_string(needed) +
                       " with every required member set); rebuild it against this ddo's headers");
            throw VerificationError(r.refusal_reason);
        };
        if (r.kind == "model") {
            const auto * vt = static_cast<const ddo_model_vtable *>(table);
            const std::size_t needed = offsetof(ddo_model_vtable, run) + sizeof(vt->run);
            if (struct_size < needed || vt->run == nullptr) too_small(needed, "model");
            loaded->model = vt;
        } else {
            const auto * vt = static_cast<const ddo_allocator_vtable *>(table);
            const std::size_t needed = offsetof(ddo_allocator_vtable, get_stats) + sizeof(vt->get_stats);
            if (struct_size < needed || !vt->pool_create || !vt->pool_close || !vt->reserve || !vt->release ||
                !vt->set_flags || !vt->trim_idle || !vt->get_stats)
                too_small(needed, "allocator");
            loaded->allocator = vt;
        }
        r.status = PluginStatus::loaded;
        loaded->record = r;
        loaded->host = &host;
        spdlog::debug("loader: loaded {} {} from {} (sha256 {})", r.kind, r.name, file, short_digest(r.actual_sha256));
        slots[i].loaded = std::move(loaded);
        return *slots[i].loaded;
    }

    std::string dirs_list() const {
        std::string out;
        for (const auto & d : dirs) out += (out.empty() ? "" : ", ") + d.string();
        return out.empty() ? "(no plugin directories)" : out;
    }
};

PluginRegistry::PluginRegistry() : impl_(std::make_unique<Impl>()) {}
PluginRegistry::PluginRegistry(PluginRegistry &&) noexcept = default;
PluginRegistry & PluginRegistry::operator=(PluginRegistry &&) noexcept = default;
PluginRegistry::~PluginRegistry() = default;

PluginRegistry PluginRegistry::discover(const std::vector<fs::path> & dirs) {
    PluginRegistry registry;
    Impl & impl = *registry.impl_;
    impl.dirs = dirs;
    for (const fs::path & dir : dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) {
            spdlog::debug("loader: plugin directory {} does not exist, skipped", dir.string());
            continue;
        }
        const fs::path manifest_file = dir / kArtifactManifestFileName;
        std::vector<fs::path> listed;
        const bool has_manifest = fs::exists(fs::symlink_status(manifest_file, ec));
        // An untrusted directory is skipped whole, with a warning: its manifest is not read, so it can neither list
        // plugins nor disable the builtin ones by repeating their names (duplicate-name refusals).
        if (const std::string why = untrusted_directory_reason(dir, manifest_file, has_manifest); !why.empty()) {
            spdlog::warn("loader: plugin directory {} skipped: {}", dir.string(), why);
            impl.skipped.emplace_back(dir, why);
            continue;
        }
        if (has_manifest) {
            ArtifactManifest manifest = read_artifact_manifest(manifest_file);
            for (ArtifactEntry & entry : manifest.artifacts) {
                listed.push_back(entry.path);
                PluginRecord record;
                record.artifact = std::move(entry);
                record.name = record.artifact.name;
                record.kind = record.artifact.kind;
                impl.records.push_back(std::move(record));
            }
        }
        // Files nobody listed: refused, but shown, so a forgotten manifest entry is visible.
        std::vector<fs::path> unlisted;
        for (const auto & entry : fs::directory_iterator(dir, ec)) {
            if (!is_shared_object(entry)) continue;
            const fs::path path = entry.path().lexically_normal();
            if (std::find(listed.begin(), listed.end(), path) == listed.end()) unlisted.push_back(path);
        }
        std::sort(unlisted.begin(), unlisted.end());
        for (const fs::path & path : unlisted) {
            PluginRecord record;
            record.artifact.name = name_from_file(path);
            record.artifact.file = path.filename().string();
            record.artifact.path = path;
            record.artifact.manifest = has_manifest ? manifest_file : fs::path();
            record.name = record.artifact.name;
            record.status = PluginStatus::refused;
            record.refusal = RefusalKind::no_manifest_entry;
            record.refusal_reason =
                "plugin file '" + path.string() + "' has no entry in '" + manifest_file.string() +
                (has_manifest ? "'" : "' (the directory has no manifest)") +
                "; a drop-in plugin must ship a reviewed [[artifact]] entry (name, kind, file, size, sha256, "
                "platform, fingerprint), see docs/architecture.md, Note [Artifact manifest]";
            impl.records.push_back(std::move(record));
        }
    }
    impl.slots.resize(impl.records.size());

    // Duplicate names across (or within) manifests: refuse every copy, naming all the files.
    std::map<std::string, std::vector<std::size_t>> by_name;
    for (std::size_t i = 0; i < impl.records.size(); ++i) {
        if (impl.records[i].refusal == RefusalKind::no_manifest_entry) continue;
        by_name[impl.records[i].artifact.name].push_back(i);
    }
    for (const auto & [name, indices] : by_name) {
        if (indices.size() < 2) continue;
        std::string files;
        for (std::size_t i : indices) {
            files += (files.empty() ? "" : " and ") + std::string("'") + impl.records[i].artifact.path.string() +
                     "' (listed in '" + impl.records[i].artifact.manifest.string() + "')";
        }
        for (std::size_t i : indices) {
            impl.refuse(i, RefusalKind::duplicate_name,
                        "plugin name '" + name + "' is listed more than once: " + files +
                            "; expected one plugin per name. Remove one of the plugin directories or rename the "
                            "drop-in plugin");
        }
    }
    return registry;
}

const std::vector<PluginRecord> & PluginRegistry::records() const { return impl_->records; }

const std::vector<fs::path> & PluginRegistry::dirs() const { return impl_->dirs; }

const std::vector<std::pair<fs::path, std::string>> & PluginRegistry::skipped_dirs() const { return impl_->skipped; }

bool PluginRegistry::verify_all() {
    bool all_ok = true;
    for (std::size_t i = 0; i < impl_->records.size(); ++i) all_ok = impl_->verify(i) && all_ok;
    return all_ok;
}

void PluginRegistry::probe_all() {
    for (std::size_t i = 0; i < impl_->records.size(); ++i) impl_->negotiate(i);
}

const LoadedPlugin & PluginRegistry::load(std::string_view name_or_alias, std::string_view kind) {
    Impl & impl = *impl_;
    const std::string wanted(name_or_alias);
    std::vector<std::size_t> by_name;
    for (std::size_t i = 0; i < impl.records.size(); ++i) {
        if (impl.records[i].artifact.name == wanted) by_name.push_back(i);
    }
    std::size_t index = 0;
    if (!by_name.empty()) {
        index = by_name.front();  // several: all refused as duplicate_name, fetch() throws that reason
    } else {
        std::vector<std::size_t> by_alias;
        for (std::size_t i = 0; i < impl.records.size(); ++i) {
            const PluginRecord & r = impl.records[i];
            if (r.status == PluginStatus::refused) continue;
            if (!kind.empty() && r.artifact.kind != kind) continue;
            if (!impl.negotiate(i)) continue;  // silent in discovery, loud when asked for by name
            if (std::find(r.aliases.begin(), r.aliases.end(), wanted) != r.aliases.end()) by_alias.push_back(i);
        }
        if (by_alias.empty()) {
            // An alias is only known after negotiation, which only a verified file gets. When no
            // plugin of this kind verified at all, the refusals are the cause: exit 3 with them,
            // not "no such plugin". Otherwise (a typo beside a broken drop-in) it stays a usage error.
            std::string refused;
            bool any_verified = false;
            for (const PluginRecord & r : impl.records) {
                if (!kind.empty() && !r.artifact.kind.empty() && r.artifact.kind != kind) continue;
                if (r.status != PluginStatus::refused) any_verified = true;
                else refused += (refused.empty() ? "" : "; ") + r.artifact.name + ": " + r.refusal_reason;
            }
            if (!any_verified && !refused.empty())
                throw VerificationError("no verified " + (kind.empty() ? std::string() : std::string(kind) + " ") +
                                        "plugin is named or aliased '" + wanted + "'; every candidate was refused: " +
                                        refused);
            std::string available;
            for (const PluginRecord & r : impl.records) {
                if (!kind.empty() && !r.artifact.kind.empty() && r.artifact.kind != kind) continue;
                available += (available.empty() ? "" : ", ") + r.artifact.name;
            }
            throw UsageError("no " + (kind.empty() ? std::string() : std::string(kind) + " ") + "plugin named or aliased '" +
                             wanted + "' in " + impl.dirs_list() + " (available: " +
                             (available.empty() ? std::string("none") : available) +
                             "); run 'ddo-host plugins' to list them and see why any were refused");
        }
        if (by_alias.size() > 1) {
            std::string candidates;
            for (std::size_t i : by_alias) candidates += (candidates.empty() ? "" : ", ") + describe(impl.records[i]);
            throw UsageError("plugin alias '" + wanted + "' is ambiguous: it matches " + candidates +
                             "; ask for one of them by its full name");
        }
        index = by_alias.front();
    }
    const PluginRecord & r = impl.records[index];
    if (!kind.empty() && !r.artifact.kind.empty() && r.artifact.kind != kind)
        throw UsageError("plugin " + describe(r) + " is a" + (r.artifact.kind == "allocator" ? "n " : " ") +
                         r.artifact.kind + " plugin, expected a" + (kind == "allocator" ? "n " : " ") +
                         std::string(kind) + " plugin; pick a " + std::string(kind) + " plugin (ddo-host plugins)");
    return impl.fetch(index);
}

}  // namespace ddo
