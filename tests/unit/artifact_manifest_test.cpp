// read_artifact_manifest: the schema of artifacts.toml and its located errors.
#include "ddo/error.hpp"
#include "ddo/plugin/artifact_manifest.hpp"
#include "plugin_test_support.hpp"

namespace ddo::test {
namespace {

constexpr const char * kGoodEntry = R"(
[[artifact]]
name = "a"
kind = "model"
file = "liba.so"
size = 3
sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
platform = "linux-x86_64"
fingerprint = "core=1"
)";

fs::path write(const TempDir & tmp, const std::string & text) {
    std::ofstream(tmp.path() / "artifacts.toml") << text;
    return tmp.path() / "artifacts.toml";
}

std::string error_of(const fs::path & file) {
    try {
        read_artifact_manifest(file);
    } catch (const VerificationError & e) {
        return e.what();
    }
    return "(no error)";
}

TEST(ArtifactManifest, ReadsTheBuildWrittenFixtureManifest) {
    const ArtifactManifest m = read_artifact_manifest(fixture_plugin_dir() / "artifacts.toml");
    EXPECT_EQ(m.schema_version, 1);
    ASSERT_GE(m.artifacts.size(), 6u);
    for (const ArtifactEntry & e : m.artifacts) {
        EXPECT_EQ(e.path, fixture_plugin_dir() / e.file);
        EXPECT_EQ(e.manifest, fixture_plugin_dir() / "artifacts.toml");
        EXPECT_EQ(e.sha256.size(), 64u);
        EXPECT_GT(e.size, 0u);
    }
}

TEST(ArtifactManifest, ParsesEveryField) {
    TempDir tmp;
    const ArtifactManifest m = read_artifact_manifest(write(tmp, std::string("schema_version = 1\n") + kGoodEntry));
    ASSERT_EQ(m.artifacts.size(), 1u);
    const ArtifactEntry & e = m.artifacts[0];
    EXPECT_EQ(e.name, "a");
    EXPECT_EQ(e.kind, "model");
    EXPECT_EQ(e.size, 3u);
    EXPECT_EQ(e.platform, "linux-x86_64");
    EXPECT_EQ(e.fingerprint, "core=1");
    EXPECT_EQ(e.path, tmp.path() / "liba.so");
}

TEST(ArtifactManifest, WrittenEntriesReadBackUnchanged) {
    // A value that starts with a newline: toml++'s multi-line spelling of it read back one character short
    // (the artifact_manifest fuzz target found it; corpus fingerprint_leading_newline.toml).
    TempDir tmp;
    ArtifactManifest m;
    m.file = tmp.path() / "artifacts.toml";
    m.schema_version = kArtifactManifestSchemaVersion;
    for (const std::string fingerprint : {"\na \"quoted\" \u00e9 fp", "a\nb", "tab\there", "'''", "\r\n"}) {
        ArtifactEntry e;
        e.name = "n" + std::to_string(m.artifacts.size());
        e.kind = "model";
        e.file = "sub/lib" + e.name + ".so";
        e.size = 7;
        e.sha256 = std::string(64, 'a');
        e.platform = "linux-x86_64";
        e.fingerprint = fingerprint;
        m.artifacts.push_back(e);
    }
    write_artifact_manifest(m);
    const ArtifactManifest again = read_artifact_manifest(m.file);
    ASSERT_EQ(again.artifacts.size(), m.artifacts.size());
    for (std::size_t i = 0; i < m.artifacts.size(); ++i) {
        EXPECT_EQ(again.artifacts[i].name, m.artifacts[i].name);
        EXPECT_EQ(again.artifacts[i].file, m.artifacts[i].file);
        EXPECT_EQ(again.artifacts[i].fingerprint, m.artifacts[i].fingerprint) << "entry " << i;
    }
}

TEST(ArtifactManifest, RefusesAnotherSchemaVersionWithItsLocation) {
    TempDir tmp;
    const fs::path f = write(tmp, std::string("schema_version = 2\n") + kGoodEntry);
    const std::string msg = error_of(f);
    EXPECT_NE(msg.find(f.string() + ":1:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("schema_version must be 1, found 2"), std::string::npos) << msg;
}

TEST(ArtifactManifest, RefusesBytesThatAreNotUtf8BeforeParsing) {
    TempDir tmp;
    const std::string e = error_of(write(tmp, std::string("schema_version = 1\n# \xff\xfe\n") + kGoodEntry));
    EXPECT_NE(e.find("artifacts.toml:2:3: not UTF-8"), std::string::npos) << e;
}

TEST(ArtifactManifest, RefusesUnknownKeys) {
    TempDir tmp;
    const std::string msg = error_of(write(tmp, std::string("schema_version = 1\n") + kGoodEntry + "signed_by = \"x\"\n"));
    EXPECT_NE(msg.find("unknown [[artifact]] key 'signed_by'"), std::string::npos) << msg;
}

TEST(ArtifactManifest, RefusesPathsThatLeaveTheDirectory) {
    TempDir tmp;
    std::string entry = kGoodEntry;
    entry.replace(entry.find("liba.so"), 7, "../liba.so");
    const std::string msg = error_of(write(tmp, "schema_version = 1\n" + entry));
    EXPECT_NE(msg.find("without '..'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("../liba.so"), std::string::npos) << msg;
}

TEST(ArtifactManifest, RefusesMalformedDigestAndMissingKeys) {
    TempDir tmp;
    std::string entry = kGoodEntry;
    entry.replace(entry.find("ba7816bf"), 8, "BA7816BF");
    EXPECT_NE(error_of(write(tmp, "schema_version = 1\n" + entry)).find("64 lowercase hex digits"), std::string::npos);
    std::string no_size = kGoodEntry;
    no_size.erase(no_size.find("size = 3\n"), 9);
    EXPECT_NE(error_of(write(tmp, "schema_version = 1\n" + no_size)).find("no 'size' key"), std::string::npos);
}

TEST(ArtifactManifest, RefusesInvalidToml) {
    TempDir tmp;
    const std::string msg = error_of(write(tmp, "schema_version = = 1\n"));
    EXPECT_NE(msg.find("not valid TOML"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ddo::test
