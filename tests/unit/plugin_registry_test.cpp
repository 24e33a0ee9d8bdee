// PluginRegistry: lookup, loading, and one test per refusal class, each asserting the exact class
// and the key parts of the message (file, expected vs found, next step).
#include <fcntl.h>
#include <link.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "ddo/error.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/plugin/plugin_host_api.hpp"
#include "ddo/plugin/artifact_verify.hpp"
#include "ddo/plugin/plugin_registry.hpp"
#include "plugin_test_support.hpp"

namespace ddo::test {
namespace {

const PluginRecord & record_of(const PluginRegistry & registry, const std::string & name) {
    for (const PluginRecord & r : registry.records())
        if (r.artifact.name == name) return r;
    throw std::runtime_error("no record " + name);
}

// Loads `name` and returns the VerificationError message ("" when nothing was thrown).
std::string refusal_message(PluginRegistry & registry, const std::string & name, const std::string & kind = "model") {
    try {
        registry.load(name, kind);
    } catch (const VerificationError & e) {
        return e.what();
    }
    return "";
}

void expect_contains(const std::string & text, const std::string & part) {
    EXPECT_NE(text.find(part), std::string::npos) << "expected to find \"" << part << "\" in:\n" << text;
}

int objects_mapped_from_proc_fd() {
    int count = 0;
    dl_iterate_phdr(
        [](dl_phdr_info * info, size_t, void * data) {
            if (info->dlpi_name != nullptr && std::string_view(info->dlpi_name).starts_with("/proc/self/fd/"))
                ++*static_cast<int *>(data);
            return 0;
        },
        &count);
    return count;
}

TEST(PluginRegistry, LoadsTheGoodModelAndRoutesItsLogToPluginLogger) {
    std::ostringstream log;
    auto logger = std::make_shared<spdlog::logger>("plugin.fixture_good",
                                                   std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
    logger->set_level(spdlog::level::trace);
    spdlog::register_logger(logger);

    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const LoadedPlugin & p = registry.load("fixture_good", "model");
    ASSERT_NE(p.model, nullptr);
    EXPECT_EQ(p.allocator, nullptr);
    EXPECT_EQ(p.model->struct_size, sizeof(ddo_model_vtable));
    ASSERT_NE(p.model->run, nullptr);
    EXPECT_STREQ(p.model->components[0], "transformer");
    EXPECT_EQ(p.record.status, PluginStatus::loaded);
    EXPECT_EQ(p.record.version, "0.0.1");
    EXPECT_EQ(p.record.actual_sha256, fixture_entry("fixture_good").sha256);
    EXPECT_EQ(p.record.xxh3_128.size(), 32u);
    EXPECT_EQ(p.record.aliases, (std::vector<std::string>{"fixture_alias", "shared_alias"}));
    expect_contains(log.str(), "fixture_good: vtable ready");

    ASSERT_NE(p.host, nullptr);
    EXPECT_EQ(p.model->run(nullptr), DDO_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(p.host->last_error(), "fixture_good: run without a context");  // set_error copied it
    EXPECT_EQ(&registry.load("fixture_good", "model"), &p);                    // loaded once
    spdlog::drop("plugin.fixture_good");
}

TEST(PluginRegistry, LoadsThePureCAllocatorAndItsTableWorks) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const LoadedPlugin & p = registry.load("fixture_alloc", "allocator");
    ASSERT_NE(p.allocator, nullptr);
    const ddo_allocator_vtable & vt = *p.allocator;
    ddo_alloc_config config{};
    config.struct_size = sizeof config;
    config.backend = DDO_ALLOC_BACKEND_HOST;
    ddo_alloc_pool * pool = nullptr;
    ASSERT_EQ(vt.pool_create(&config, &pool), DDO_STATUS_OK);
    ddo_alloc_buffer buffer{};
    ASSERT_EQ(vt.reserve(pool, 1000, 256, &buffer), DDO_STATUS_OK);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.ptr) % 256, 0u);
    ASSERT_EQ(vt.set_flags(pool, buffer.id, DDO_ALLOC_FLAG_LEASED), DDO_STATUS_OK);
    EXPECT_EQ(vt.release(pool, buffer.id), DDO_STATUS_BUSY);
    EXPECT_EQ(vt.pool_close(pool), DDO_STATUS_BUSY);
    ASSERT_EQ(vt.set_flags(pool, buffer.id, 0), DDO_STATUS_OK);
    ddo_alloc_stats stats{};
    stats.struct_size = sizeof stats;
    ASSERT_EQ(vt.get_stats(pool, &stats), DDO_STATUS_OK);
    EXPECT_EQ(stats.bytes_in_use, 1000u);
    EXPECT_EQ(stats.refusals, 1u);
    EXPECT_EQ(vt.release(pool, buffer.id), DDO_STATUS_OK);
    EXPECT_EQ(vt.pool_close(pool), DDO_STATUS_OK);
}

TEST(PluginRegistry, FindsByNameThenUniqueAlias) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    EXPECT_EQ(registry.load("fixture_alias", "model").record.name, "fixture_good");
    EXPECT_EQ(registry.load("shared_alias", "allocator").record.name, "fixture_alloc");
    EXPECT_EQ(registry.load("fixture_allocator", "").record.name, "fixture_alloc");
}

TEST(PluginRegistry, AmbiguousAliasListsTheCandidates) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    try {
        registry.load("shared_alias", "");
        FAIL() << "expected UsageError";
    } catch (const UsageError & e) {
        const std::string msg = e.what();
        expect_contains(msg, "'shared_alias' is ambiguous");
        expect_contains(msg, "'fixture_good' (" + (fixture_plugin_dir() / "libddo_model_fixture_good.so").string());
        expect_contains(msg, "'fixture_alloc' (");
        EXPECT_EQ(e.code(), ExitCode::usage);
    }
}

TEST(PluginRegistry, UnknownNameAndWrongKindAreUsageErrors) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    try {
        registry.load("no_such_plugin", "model");
        FAIL() << "expected UsageError";
    } catch (const UsageError & e) {
        expect_contains(e.what(), "no model plugin named or aliased 'no_such_plugin'");
        expect_contains(e.what(), "fixture_good");
        expect_contains(e.what(), "ddo-host plugins");
    }
    EXPECT_THROW(registry.load("fixture_alloc", "model"), UsageError);
}

TEST(PluginRegistry, RefusesAbiMajorMismatchBeforeGetVtable) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const std::string msg = refusal_message(registry, "fixture_wrong_abi");
    EXPECT_EQ(record_of(registry, "fixture_wrong_abi").refusal, RefusalKind::abi_major_mismatch);
    expect_contains(msg, "libddo_model_fixture_wrong_abi.so");
    expect_contains(msg, "ABI major mismatch (expected 1, found 2");
    expect_contains(msg, "rebuild the plugin");
}

TEST(PluginRegistry, RefusesFingerprintMismatchBeforeGetVtable) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const std::string msg = refusal_message(registry, "fixture_wrong_fingerprint");
    EXPECT_EQ(record_of(registry, "fixture_wrong_fingerprint").refusal, RefusalKind::fingerprint_mismatch);
    expect_contains(msg, "libddo_model_fixture_wrong_fingerprint.so");
    expect_contains(msg, "found 'core=0.0.0;torch=0.0;cuda=none;cc=other'");
    expect_contains(msg, "expected '" + fixture_entry("fixture_good").fingerprint + "'");
}

TEST(PluginRegistry, RefusesMissingSymbolBeforeNegotiate) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const std::string msg = refusal_message(registry, "fixture_missing_symbol");
    EXPECT_EQ(record_of(registry, "fixture_missing_symbol").refusal, RefusalKind::missing_symbol);
    expect_contains(msg, "libddo_model_fixture_missing_symbol.so");
    expect_contains(msg, "does not export ddo_plugin_get_vtable");
}

TEST(PluginRegistry, RefusesPluginThatThrowsNamingItsMessage) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    const std::string msg = refusal_message(registry, "fixture_throws");
    EXPECT_EQ(record_of(registry, "fixture_throws").refusal, RefusalKind::plugin_threw);
    expect_contains(msg, "libddo_model_fixture_throws.so");
    expect_contains(msg, "ddo_plugin_get_vtable failed: fixture_throws: initialisation failed on purpose");
    expect_contains(msg, "status 6");  // DDO_STATUS_INTERNAL
}

TEST(PluginRegistry, RefusesDigestMismatchNamingFileAndBothDigests) {
    TempDir tmp;
    const ArtifactEntry e = copy_fixture("fixture_good", tmp.path());
    write_manifest(tmp.path(), {e});
    flip_byte(e.path);
    auto registry = PluginRegistry::discover({tmp.path()});
    EXPECT_FALSE(registry.verify_all());
    const PluginRecord & r = record_of(registry, "fixture_good");
    EXPECT_EQ(r.refusal, RefusalKind::digest_mismatch);
    ASSERT_EQ(r.actual_sha256.size(), 64u);
    EXPECT_NE(r.actual_sha256, e.sha256);
    const std::string msg = r.refusal_reason;
    expect_contains(msg, e.path.string());
    expect_contains(msg, "expected " + e.sha256);
    expect_contains(msg, "found " + r.actual_sha256);
    expect_contains(msg, "tools/ddo build");
    EXPECT_EQ(refusal_message(registry, "fixture_good"), msg);  // and load refuses it

    auto fresh = PluginRegistry::discover({tmp.path()});  // load alone (no verify_all first) too
    EXPECT_EQ(refusal_message(fresh, "fixture_good"), msg);
}

TEST(PluginRegistry, AliasLookupWhenEveryCandidateWasRefusedIsAVerificationErrorNamingThem) {
    TempDir tmp;
    const ArtifactEntry e = copy_fixture("fixture_good", tmp.path());
    write_manifest(tmp.path(), {e});
    flip_byte(e.path);
    auto registry = PluginRegistry::discover({tmp.path()});
    try {
        registry.load("fixture_alias", "model");
        FAIL() << "an alias lookup whose only candidate is refused must be a VerificationError";
    } catch (const VerificationError & err) {
        const std::string msg = err.what();
        expect_contains(msg, "'fixture_alias'");
        expect_contains(msg, "fixture_good");
        expect_contains(msg, "sha256 mismatch");
        expect_contains(msg, e.path.string());
    }
}

TEST(PluginRegistry, RefusesSymlinkedFile) {
    TempDir tmp;
    fs::create_directory(tmp.path() / "real");
    fs::create_directory(tmp.path() / "plugins");
    ArtifactEntry e = copy_fixture("fixture_good", tmp.path() / "real");
    fs::create_symlink(e.path, tmp.path() / "plugins" / e.file);
    e.manifest = tmp.path() / "plugins" / "artifacts.toml";
    write_manifest(tmp.path() / "plugins", {e});  // digest is right: only the link is wrong
    auto registry = PluginRegistry::discover({tmp.path() / "plugins"});
    const std::string msg = refusal_message(registry, "fixture_good");
    EXPECT_EQ(record_of(registry, "fixture_good").refusal, RefusalKind::unsafe_file);
    expect_contains(msg, (tmp.path() / "plugins" / e.file).string());
    expect_contains(msg, "symbolic link");
    expect_contains(msg, "Copy the real file");
}

TEST(PluginRegistry, RefusesGroupOrWorldWritableFile) {
    for (mode_t mode : {0757, 0775}) {
        TempDir tmp;
        const ArtifactEntry e = copy_fixture("fixture_good", tmp.path());
        write_manifest(tmp.path(), {e});
        ASSERT_EQ(::chmod(e.path.c_str(), mode), 0);
        auto registry = PluginRegistry::discover({tmp.path()});
        EXPECT_FALSE(registry.verify_all());
        const std::string msg = refusal_message(registry, "fixture_good");
        EXPECT_EQ(record_of(registry, "fixture_good").refusal, RefusalKind::unsafe_file) << std::oct << mode;
        expect_contains(msg, e.path.string());
        std::ostringstream octal;
        octal << std::oct << mode;
        expect_contains(msg, "group/world-writable (mode 0" + octal.str());
        expect_contains(msg, "chmod go-w");
    }
}

// Issue 16 item 6: a plugin directory anyone else can write (or whose manifest is a link, or writable) is skipped
// whole with its reason — it cannot list plugins, and it cannot disable the builtin ones by repeating their names.
TEST(PluginRegistry, AnUntrustedDirectoryIsSkippedAndCannotShadowTheBuiltinPlugins) {
    for (int variant = 0; variant < 3; ++variant) {
        TempDir tmp;
        const fs::path dir = tmp.path() / "dropin";
        fs::create_directories(dir);
        const ArtifactEntry copy = copy_fixture("fixture_good", dir, "libddo_model_fixture_good_dropin.so");
        write_manifest(dir, {copy});
        std::string expect;
        if (variant == 0) {  // the directory itself is world-writable (no sticky bit)
            ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
            expect = "is group/world-writable (mode 0777)";
        } else if (variant == 1) {  // a directory above it is group-writable
            ASSERT_EQ(::chmod(tmp.path().c_str(), 0770), 0);
            expect = "'" + tmp.path().string() + "' is group/world-writable (mode 0770)";
        } else {  // the manifest is a symbolic link to a manifest elsewhere
            const fs::path real = tmp.path() / "real.toml";
            fs::rename(dir / "artifacts.toml", real);
            fs::create_symlink(real, dir / "artifacts.toml");
            expect = "is a symbolic link";
        }
        auto registry = PluginRegistry::discover({fixture_plugin_dir(), dir});
        ASSERT_EQ(registry.skipped_dirs().size(), 1u) << variant;
        EXPECT_EQ(registry.skipped_dirs()[0].first, dir);
        expect_contains(registry.skipped_dirs()[0].second, expect);
        for (const PluginRecord & r : registry.records()) EXPECT_NE(r.artifact.path, copy.path) << "the drop-in was read";
        EXPECT_NO_THROW(registry.load("fixture_good", "model")) << "the builtin plugin is not shadowed (variant " << variant << ")";
        ::chmod(dir.c_str(), 0700);
        ::chmod(tmp.path().c_str(), 0700);
    }
    // A sticky world-writable ancestor (/tmp itself) is fine: others cannot rename what is ours in it.
    TempDir ok;
    EXPECT_TRUE(PluginRegistry::discover({ok.path()}).skipped_dirs().empty());
}

// Issue 16 item 6: the descriptor a plugin is loaded from is a sealed memfd copy of the bytes hashed, so rewriting the
// verified file in place afterwards (as its owner can) changes nothing that is mapped.
TEST(PluginRegistry, LoadsASealedCopyOfTheBytesItHashed) {
    TempDir tmp;
    const ArtifactEntry e = copy_fixture("fixture_good", tmp.path());
    write_manifest(tmp.path(), {e});
    ArtifactVerdict v = verify_artifact(e, /*sealed_copy=*/true);
    ASSERT_TRUE(v.ok()) << v.reason;
    ASSERT_TRUE(v.sealed) << v.seal_reason;
    const int seals = ::fcntl(v.fd.get(), F_GET_SEALS);
    EXPECT_EQ(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
              F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    EXPECT_LT(::write(v.fd.get(), "x", 1), 0) << "a sealed copy refuses writes";
    flip_byte(e.path);  // the owner rewrites the file in place after verification
    EXPECT_EQ(digest_fd(v.fd.get(), e.path).sha256, e.sha256) << "the copy still holds the verified bytes";
    EXPECT_FALSE(verify_artifact(e).ok()) << "the file itself no longer verifies";
    // Without sealed_copy (ddo-host verify) the descriptor is the file's.
    EXPECT_FALSE(verify_artifact(copy_fixture("fixture_good", tmp.path())).sealed);
    // And a load goes through the sealed copy, recorded on the plugin's record.
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    ASSERT_NO_THROW(registry.load("fixture_good", "model"));
    EXPECT_TRUE(record_of(registry, "fixture_good").sealed) << record_of(registry, "fixture_good").seal_reason;
}

TEST(PluginRegistry, RefusesDuplicateNamesNamingBothFiles) {
    TempDir tmp;
    const ArtifactEntry copy = copy_fixture("fixture_good", tmp.path(), "libddo_model_fixture_good_dropin.so");
    write_manifest(tmp.path(), {copy});
    auto registry = PluginRegistry::discover({fixture_plugin_dir(), tmp.path()});
    const std::string msg = refusal_message(registry, "fixture_good");
    expect_contains(msg, "plugin name 'fixture_good' is listed more than once");
    expect_contains(msg, fixture_entry("fixture_good").path.string());
    expect_contains(msg, copy.path.string());
    int refused = 0;
    for (const PluginRecord & r : registry.records())
        if (r.artifact.name == "fixture_good") refused += r.refusal == RefusalKind::duplicate_name;
    EXPECT_EQ(refused, 2);
    EXPECT_NO_THROW(registry.load("fixture_alloc", "allocator"));  // other names are unaffected
}

TEST(PluginRegistry, RefusesFileWithoutManifestEntry) {
    TempDir tmp;
    const ArtifactEntry listed = copy_fixture("fixture_alloc", tmp.path());
    copy_fixture("fixture_good", tmp.path());
    write_manifest(tmp.path(), {listed});  // fixture_good's file is present but unlisted
    auto registry = PluginRegistry::discover({tmp.path()});
    EXPECT_FALSE(registry.verify_all());
    const std::string msg = refusal_message(registry, "fixture_good");
    EXPECT_EQ(record_of(registry, "fixture_good").refusal, RefusalKind::no_manifest_entry);
    expect_contains(msg, (tmp.path() / "libddo_model_fixture_good.so").string());
    expect_contains(msg, "has no entry in '" + (tmp.path() / "artifacts.toml").string());
    EXPECT_NO_THROW(registry.load("fixture_alloc", "allocator"));
}

TEST(PluginRegistry, RefusesManifestFingerprintAndPlatformMismatchWithoutLoading) {
    TempDir tmp;
    ArtifactEntry a = copy_fixture("fixture_good", tmp.path());
    a.fingerprint = "core=9.9.9;torch=none;cuda=none;cc=none";
    ArtifactEntry b = copy_fixture("fixture_alloc", tmp.path());
    b.platform = "linux-sparc";
    write_manifest(tmp.path(), {a, b});
    const int mapped_before = objects_mapped_from_proc_fd();
    auto registry = PluginRegistry::discover({tmp.path()});
    expect_contains(refusal_message(registry, "fixture_good"), "manifest '" + a.manifest.string() + "' says 'core=9.9.9");
    EXPECT_EQ(record_of(registry, "fixture_good").refusal, RefusalKind::fingerprint_mismatch);
    expect_contains(refusal_message(registry, "fixture_alloc", "allocator"), "built for platform 'linux-sparc'");
    EXPECT_EQ(record_of(registry, "fixture_alloc").refusal, RefusalKind::platform_mismatch);
    EXPECT_EQ(objects_mapped_from_proc_fd(), mapped_before);
}

TEST(PluginRegistry, VerifyAllHashesWithoutLoading) {
    const int mapped_before = objects_mapped_from_proc_fd();
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    EXPECT_TRUE(registry.verify_all());  // wrong ABI etc. hash fine: they are refused only at load
    for (const PluginRecord & r : registry.records()) {
        EXPECT_EQ(r.status, PluginStatus::verified) << r.artifact.name;
        EXPECT_EQ(r.actual_sha256, r.artifact.sha256) << r.artifact.name;
    }
    EXPECT_EQ(objects_mapped_from_proc_fd(), mapped_before);
}

TEST(PluginRegistry, ProbeAllNegotiatesWithoutFetchingVtables) {
    auto registry = PluginRegistry::discover({fixture_plugin_dir()});
    registry.probe_all();
    EXPECT_EQ(record_of(registry, "fixture_throws").status, PluginStatus::verified);  // get_vtable not called
    EXPECT_EQ(record_of(registry, "fixture_good").aliases.size(), 2u);
    EXPECT_EQ(record_of(registry, "fixture_wrong_abi").refusal, RefusalKind::abi_major_mismatch);
    EXPECT_EQ(record_of(registry, "fixture_missing_symbol").refusal, RefusalKind::missing_symbol);
}

TEST(PluginRegistry, MissingDirectoriesAreSkipped) {
    auto registry = PluginRegistry::discover({"/nonexistent/ddo/plugins"});
    EXPECT_TRUE(registry.records().empty());
    EXPECT_TRUE(registry.verify_all());
    EXPECT_EQ(registry.dirs().size(), 1u);
}

TEST(RefusalKind, EveryClassHasAName) {
    EXPECT_STREQ(to_string(RefusalKind::digest_mismatch), "digest_mismatch");
    EXPECT_STREQ(to_string(RefusalKind::plugin_threw), "plugin_threw");
    EXPECT_STREQ(to_string(RefusalKind::platform_mismatch), "platform_mismatch");
}

}  // namespace
}  // namespace ddo::test
