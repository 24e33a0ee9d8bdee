// Helpers for the plugin loader tests: a private temp directory, the built fixture plugins, and a
// manifest writer so tests can build plugin directories (copies, symlinks, flipped bytes) at run time.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ddo/plugin/artifact_manifest.hpp"

namespace ddo::test {

namespace fs = std::filesystem;

inline fs::path fixture_plugin_dir() { return fs::path(DDO_BINARY_DIR) / "tests" / "fixtures" / "plugins"; }

// mkdtemp (mode 0700) under TMPDIR; removed with everything in it on destruction.
class TempDir {
public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "ddo-plugin-test-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir &) = delete;
    TempDir & operator=(const TempDir &) = delete;
    const fs::path & path() const { return path_; }

private:
    fs::path path_;
};

// The entry of the build-written fixture manifest for `name` (its sha256 comes from CMake).
inline ArtifactEntry fixture_entry(const std::string & name) {
    const ArtifactManifest manifest = read_artifact_manifest(fixture_plugin_dir() / kArtifactManifestFileName);
    for (const ArtifactEntry & e : manifest.artifacts)
        if (e.name == name) return e;
    throw std::runtime_error("fixture '" + name + "' not in the fixture manifest; was the fixture group built?");
}

inline void write_manifest(const fs::path & dir, const std::vector<ArtifactEntry> & entries) {
    std::ofstream out(dir / kArtifactManifestFileName);
    out << "schema_version = 1\n";
    for (const ArtifactEntry & e : entries) {
        out << "\n[[artifact]]\nname = \"" << e.name << "\"\nkind = \"" << e.kind << "\"\nfile = \"" << e.file
            << "\"\nsize = " << e.size << "\nsha256 = \"" << e.sha256 << "\"\nplatform = \"" << e.platform
            << "\"\nfingerprint = \"" << e.fingerprint << "\"\n";
    }
}

// Copies a fixture plugin into dir (mode 0755) and returns its manifest entry, renamed to `file`.
inline ArtifactEntry copy_fixture(const std::string & name, const fs::path & dir, const std::string & file = "") {
    ArtifactEntry e = fixture_entry(name);
    if (!file.empty()) e.file = file;
    fs::copy_file(e.path, dir / e.file, fs::copy_options::overwrite_existing);
    ::chmod((dir / e.file).c_str(), 0755);
    e.path = dir / e.file;
    e.manifest = dir / kArtifactManifestFileName;
    return e;
}

// Flips one bit of the byte at `offset` (default: the middle of the file).
inline void flip_byte(const fs::path & file, std::streamoff offset = -1) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    if (offset < 0) {
        f.seekg(0, std::ios::end);
        offset = f.tellg() / 2;
    }
    f.seekg(offset);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(offset);
    f.write(&c, 1);
}

inline std::string read_text(const fs::path & file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace ddo::test
