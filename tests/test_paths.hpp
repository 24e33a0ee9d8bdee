#pragma once
// Paths into the build and source trees, resolved at run time (Note [Test paths], docs/validation.md).
//
// The test executables' compile lines name no folder of the clone: cmake/ddo_testing.cmake rewrites every definition
// whose value is a path under the build or the source tree (QI21_FIXTURE_DIR, DDO_HOST_BIN, DDO_SOURCE_DIR, ...) into
// a call of these functions, so ccache serves a fresh clone in another folder (CI) the objects an earlier clone
// compiled. Force-included into every ddo_add_gtest() translation unit (-include test_paths.hpp).

namespace ddo::test {

// The build tree: the nearest folder above this executable that holds a CMakeCache.txt. `relative` is appended with
// a '/' when not empty. The result is a NUL-terminated string that lives until the process ends.
const char * build_path(const char * relative);

// The source tree (CMAKE_HOME_DIRECTORY in that CMakeCache.txt), the same way.
const char * source_path(const char * relative);

}  // namespace ddo::test
