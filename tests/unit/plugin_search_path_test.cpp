// plugin_search_dirs: builtin, then --plugin-dir, then DDO_PLUGIN_PATH; duplicates kept once.
#include <gtest/gtest.h>

#include "ddo/plugin/plugin_search_path.hpp"

namespace ddo {
namespace {

namespace fs = std::filesystem;

TEST(PluginSearchPath, BuiltinThenCliThenEnvironment) {
    const auto dirs = plugin_search_dirs("/opt/ddo/lib/ddo/plugins", {"/a", "/b/"}, std::string("/c::/d:/a"));
    const std::vector<fs::path> expected = {"/opt/ddo/lib/ddo/plugins", "/a", "/b", "/c", "/d"};
    EXPECT_EQ(dirs, expected);
}

TEST(PluginSearchPath, EmptyEnvironmentAddsNothingAndRelativeDirsBecomeAbsolute) {
    const auto dirs = plugin_search_dirs("", {"rel/dir"}, std::string(""));
    ASSERT_EQ(dirs.size(), 1u);
    EXPECT_TRUE(dirs[0].is_absolute());
    EXPECT_EQ(dirs[0], (fs::current_path() / "rel/dir").lexically_normal());
}

TEST(PluginSearchPath, ReadsDdoPluginPathFromTheEnvironment) {
    ::setenv("DDO_PLUGIN_PATH", "/from/env", 1);
    const auto dirs = plugin_search_dirs("/builtin", {});
    ::unsetenv("DDO_PLUGIN_PATH");
    const std::vector<fs::path> expected = {"/builtin", "/from/env"};
    EXPECT_EQ(dirs, expected);
    EXPECT_FALSE(plugin_path_from_environment().has_value());
}

}  // namespace
}  // namespace ddo
