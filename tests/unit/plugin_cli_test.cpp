// ddo-host plugins / verify, driven as a user would: the built binary, its output and exit code.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include <fcntl.h>

#include "ddo/util/file_digest.hpp"
#include "ddo/util/unique_fd.hpp"
#include "plugin_test_support.hpp"

namespace ddo::test {
namespace {

struct Result {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};

std::string quote(const fs::path & p) { return "'" + p.string() + "'"; }

// env_prefix: e.g. "DDO_PLUGIN_PATH=/x" (DDO_PLUGIN_PATH is unset otherwise).
Result run_host(const std::string & args, const std::string & env_prefix = "") {
    const fs::path host = fs::path(DDO_BINARY_DIR) / "bin" / "ddo-host";
    const std::string cmd = "env -u DDO_PLUGIN_PATH " + env_prefix + " " + quote(host) + " " + args + " 2>&1";
    Result r;
    FILE * pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return r;
    std::array<char, 4096> buf{};
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) r.output.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

TEST(PluginCli, PluginsListsBuiltFixturesAsVerified) {
    const Result r = run_host("plugins --plugin-dir " + quote(fixture_plugin_dir()));
    // The fixture directory holds refused plugins on purpose: the listing says so with exit 3, like verify.
    ASSERT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("plugin(s) refused"), std::string::npos) << r.output;
    const auto line_of = [&](const std::string & name) {
        const auto at = r.output.find("\n" + name + " ");
        return at == std::string::npos ? std::string() : r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1);
    };
    EXPECT_NE(line_of("fixture_good").find("verified"), std::string::npos) << r.output;
    EXPECT_NE(line_of("fixture_good").find(fixture_entry("fixture_good").sha256.substr(0, 12)), std::string::npos);
    EXPECT_NE(line_of("fixture_alloc").find("allocator"), std::string::npos) << r.output;
    EXPECT_NE(line_of("fixture_wrong_abi").find("refused: abi_major_mismatch"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("file: " + (fixture_plugin_dir() / "libddo_model_fixture_good.so").string()),
              std::string::npos);
    // A verified model plugin's own table: description, components, supported options.
    EXPECT_NE(r.output.find("    components: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("    options: "), std::string::npos) << r.output;
}

TEST(PluginCli, PluginsOfTheBuiltTreeExitZeroAndShowWhatEachModelTakes) {
    const Result r = run_host("plugins");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("Qwen-Image 2.1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("    components: text_encoder, vision_tower, transformer, vae"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("    options: plugin.qwen_image_21.use_kv_cache"), std::string::npos) << r.output;
}

TEST(PluginCli, PluginsJsonCarriesNameKindVersionAliasesFileDigestStatus) {
    const Result r = run_host("plugins --json", "DDO_PLUGIN_PATH=" + quote(fixture_plugin_dir()));
    ASSERT_EQ(r.exit_code, 3) << r.output;  // refused fixtures are listed, and the exit code says so
    const auto j = nlohmann::json::parse(r.output);
    bool seen_good = false, seen_throws = false;
    for (const auto & p : j.at("plugins")) {
        if (p.at("name") == "fixture_good") {
            seen_good = true;
            EXPECT_EQ(p.at("kind"), "model");
            EXPECT_EQ(p.at("version"), "0.0.1");
            EXPECT_EQ(p.at("aliases"), nlohmann::json({"fixture_alias", "shared_alias"}));
            EXPECT_EQ(p.at("file"), (fixture_plugin_dir() / "libddo_model_fixture_good.so").string());
            EXPECT_EQ(p.at("sha256"), fixture_entry("fixture_good").sha256);
            EXPECT_EQ(p.at("sha256_short"), fixture_entry("fixture_good").sha256.substr(0, 12));
            EXPECT_EQ(p.at("status"), "verified");
            EXPECT_TRUE(p.contains("description") && p.contains("components") && p.contains("supported_options"))
                << p.dump();
        }
        if (p.at("name") == "fixture_missing_symbol") {
            seen_throws = true;
            EXPECT_EQ(p.at("status"), "refused");
            EXPECT_EQ(p.at("refusal"), "missing_symbol");
        }
    }
    EXPECT_TRUE(seen_good && seen_throws) << r.output;
    const auto & dirs = j.at("directories");
    EXPECT_EQ(dirs.back(), fixture_plugin_dir().string());  // DDO_PLUGIN_PATH comes after the builtin dir
}

TEST(PluginCli, VerifyOfTheBuiltPluginsExitsZero) {
    const Result builtin = run_host("verify");
    EXPECT_EQ(builtin.exit_code, 0) << builtin.output;
    const Result fixtures = run_host("verify --plugin-dir " + quote(fixture_plugin_dir()));
    EXPECT_EQ(fixtures.exit_code, 0) << fixtures.output;
    EXPECT_NE(fixtures.output.find("verified fixture_good"), std::string::npos) << fixtures.output;
}

TEST(PluginCli, FlippedByteMakesVerifyExitThreeNamingFileAndBothDigests) {
    TempDir tmp;
    const fs::path copy = tmp.path() / "plugins";
    fs::copy(fixture_plugin_dir(), copy, fs::copy_options::recursive);
    const ArtifactEntry good = fixture_entry("fixture_good");
    const fs::path flipped = copy / good.file;
    flip_byte(flipped, 100);
    const std::string actual = [&] {
        UniqueFd fd(::open(flipped.c_str(), O_RDONLY | O_CLOEXEC));
        return digest_fd(fd.get(), flipped).sha256;
    }();
    ASSERT_NE(actual, good.sha256);

    const Result r = run_host("verify --plugin-dir " + quote(copy));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find(flipped.string()), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("expected " + good.sha256), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("found " + actual), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("digest_mismatch"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("verified fixture_alloc"), std::string::npos) << r.output;  // the others still verify
}

}  // namespace
}  // namespace ddo::test
