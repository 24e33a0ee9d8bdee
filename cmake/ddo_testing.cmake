# ddo_add_gtest(<name> LABELS <label>... SOURCES ... [LIBS ...])
# Labels are the validation layers of docs/validation.md: unit, contract, parity, e2e, cuda,
# installed, abi. A GTEST_SKIP() is reported by ctest as "Skipped" (never as passed).
find_package(GTest REQUIRED)
include(GoogleTest)

# ddo_label_depends(<label> [<target>...]): the aggregate target ddo_tests_<label> builds every executable of that
# label's tests, the main plugin manifest (the tests load plugins through it) and the targets named here (what a test
# runs besides its own executable). `cmake --build B --target ddo_tests_unit` builds one layer without the others;
# tools/ddo sanitize builds only unit, contract and parity that way.
function(ddo_label_depends label)
  if(NOT TARGET ddo_tests_${label})
    add_custom_target(ddo_tests_${label})
    add_dependencies(ddo_tests_${label} ddo_manifest_main)
  endif()
  if(ARGN)
    add_dependencies(ddo_tests_${label} ${ARGN})
  endif()
endfunction()

# Build- and source-tree paths resolved at run time (tests/test_paths.hpp, Note [Test paths] in docs/validation.md):
# linked into every gtest executable and force-included into its translation units (the LibTorch tests get it from
# their shared PCH instead: ddo_test_uses_aten).
add_library(ddo_test_paths STATIC ${CMAKE_SOURCE_DIR}/tests/test_paths.cpp)
target_link_libraries(ddo_test_paths PRIVATE ddo_compile_options)
set_property(GLOBAL PROPERTY DDO_GTEST_TARGETS "")

function(ddo_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS;SOURCES;LIBS;ENVIRONMENT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${name} ${T_SOURCES})
  ddo_executable_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/bin)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${name} PRIVATE ddo_compile_options GTest::gtest GTest::gtest_main ddo_test_paths ${T_LIBS})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-include test_paths.hpp>)
  target_compile_definitions(${name} PRIVATE
    DDO_SOURCE_DIR="${CMAKE_SOURCE_DIR}" DDO_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set_property(GLOBAL APPEND PROPERTY DDO_GTEST_TARGETS ${name})
  foreach(label IN LISTS T_LABELS)
    ddo_label_depends(${label} ${name})
  endforeach()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
               ENVIRONMENT "${T_ENVIRONMENT}")
endfunction()

# ddo_test_uses_aten(<name>): the test's translation units begin with one precompiled header shared by every test
# that uses LibTorch (<ATen/ATen.h> + test_paths.hpp, built once by ddo_test_pch_donor) instead of a PCH per test.
# test_paths.hpp moves into the PCH: a header force-included before the PCH makes GCC ignore the PCH, silently (no
# -Winvalid-pch), and parse <ATen/ATen.h> again in every file, which is what each test's own PCH came to until
# 2026-12-04. GCC uses a PCH only when the user's flags match its maker's (-fPIE here, as the executables) and every
# macro its maker defined is defined the same way: the donor links only ddo_torch, whose definitions every LibTorch
# test has.
function(ddo_test_uses_aten name)
  if(NOT TARGET ddo_test_pch_donor)
    add_library(ddo_test_pch_donor OBJECT ${CMAKE_SOURCE_DIR}/tests/test_pch.cpp)
    target_link_libraries(ddo_test_pch_donor PRIVATE ddo_torch ddo_compile_options)
    # <test_paths.hpp>, not its path: the generated cmake_pch.hxx names no folder of the clone (ccache, Note [Test paths]).
    target_include_directories(ddo_test_pch_donor PRIVATE ${CMAKE_SOURCE_DIR}/tests)
    target_precompile_headers(ddo_test_pch_donor PRIVATE <ATen/ATen.h> <test_paths.hpp>)
    set_target_properties(ddo_test_pch_donor PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(ddo_test_pch_donor PRIVATE -fPIE)
  endif()
  get_target_property(opts ${name} COMPILE_OPTIONS)
  # ddo_add_gtest's unquoted `$<$<COMPILE_LANGUAGE:CXX>:-include test_paths.hpp>` is two list items.
  list(REMOVE_ITEM opts "$<$<COMPILE_LANGUAGE:CXX>:-include" "test_paths.hpp>")
  set_target_properties(${name} PROPERTIES COMPILE_OPTIONS "${opts}")
  target_precompile_headers(${name} REUSE_FROM ddo_test_pch_donor)
endfunction()

# ddo_relocate_test_paths(): called once after every test is defined (tests/CMakeLists.txt). Each gtest target's
# compile definition whose value is a path under the build or the source tree (`NAME="/abs/build/fixtures/x"`, or
# `$<TARGET_FILE:ddo-host>`) becomes `NAME=::ddo::test::build_path("fixtures/x")` (source_path for the source tree):
# no compile line names the clone's folder, so ccache (cmake/ddo_ccache.cmake) hits in a fresh clone elsewhere.
# Note [Test paths] in docs/validation.md.
function(ddo_relocate_test_paths)
  get_property(targets GLOBAL PROPERTY DDO_GTEST_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(defs ${t} COMPILE_DEFINITIONS)
    if(NOT defs)
      continue()
    endif()
    set(out)
    foreach(d IN LISTS defs)
      if(d MATCHES "^([A-Za-z0-9_]+)=\"\\$<TARGET_FILE:ddo-host>\"$")
        set(d "${CMAKE_MATCH_1}=::ddo::test::build_path(\"bin/ddo-host\")")
      elseif(d MATCHES "^([A-Za-z0-9_]+)=\"(.*)\"$")
        set(_name ${CMAKE_MATCH_1})
        set(_value ${CMAKE_MATCH_2})
        foreach(tree IN ITEMS build source)
          if(tree STREQUAL "build")
            set(_root ${CMAKE_BINARY_DIR})
          else()
            set(_root ${CMAKE_SOURCE_DIR})
          endif()
          string(FIND "${_value}" "${_root}" _at)
          string(LENGTH "${_root}" _n)
          set(_tail "-")
          if(_at EQUAL 0)
            string(SUBSTRING "${_value}" ${_n} -1 _tail)
          endif()
          if(_tail STREQUAL "" OR _tail MATCHES "^/")
            string(REGEX REPLACE "^/" "" _tail "${_tail}")
            set(d "${_name}=::ddo::test::${tree}_path(\"${_tail}\")")
            break()
          endif()
        endforeach()
      endif()
      list(APPEND out "${d}")
    endforeach()
    set_target_properties(${t} PROPERTIES COMPILE_DEFINITIONS "${out}")
  endforeach()
endfunction()

# ddo_reference_fixtures(<name> SCRIPT <script.py> DIR <out dir> [DEPENDS <file>...] COMMENT <text>)
# Parity fixtures written by a tools/reference script with ${DDO_PYTHON} into the build tree (never committed):
# by the build (target <name>_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test
# <name>_fixtures_setup (label parity). <DIR>/reference.json, written last by the script, marks a complete set.
# Both go through tools/reference/fixture_cache.py: the set is generated once per content hash (the script, its
# DEPENDS, the tools/reference modules it imports, the reference packages' versions) under ~/.cache/ddo/fixtures and
# copied into <DIR> (docs/validation.md, "Fixture cache"); DDO_FIXTURE_CACHE=off generates in place.
# Without DDO_PYTHON nothing is generated and the tests that need the fixtures skip.
function(ddo_reference_fixtures name)
  cmake_parse_arguments(F "" "SCRIPT;DIR;COMMENT" "DEPENDS" ${ARGN})
  if(NOT DDO_PYTHON)
    message(STATUS "ddo: DDO_PYTHON not set; ${name} parity fixtures are not generated (tests skip)")
    return()
  endif()
  set(_cache ${CMAKE_SOURCE_DIR}/tools/reference/fixture_cache.py)
  set(_depends_args)
  foreach(_d IN LISTS F_DEPENDS)
    list(APPEND _depends_args --depends ${_d})
  endforeach()
  # Every tools/reference module is a dependency: a changed helper module re-runs the cache, which regenerates only
  # when the set's own key changed.
  file(GLOB _reference_modules CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/*.py)
  add_custom_command(
    OUTPUT ${F_DIR}/reference.json
    COMMAND ${DDO_PYTHON} ${_cache} ${name} ${F_SCRIPT} ${F_DIR} ${_depends_args}
    DEPENDS ${F_SCRIPT} ${F_DEPENDS} ${_reference_modules} ${CMAKE_SOURCE_DIR}/tools/reference/requirements.txt
    COMMENT "${name}: ${F_COMMENT} (${DDO_PYTHON}, cached by content)"
    VERBATIM)
  add_custom_target(${name}_fixtures ALL DEPENDS ${F_DIR}/reference.json)
  # Every fixture set at once (tools/ddo sanitize builds it when no default build tree's fixtures can be reused).
  if(NOT TARGET ddo_parity_fixtures)
    add_custom_target(ddo_parity_fixtures)
  endif()
  add_dependencies(ddo_parity_fixtures ${name}_fixtures)
  list(JOIN _depends_args " " _depends_text)
  add_test(NAME ${name}_fixtures_setup
    COMMAND sh -c "test -f '${F_DIR}/reference.json' || '${DDO_PYTHON}' '${_cache}' ${name} '${F_SCRIPT}' '${F_DIR}' ${_depends_text}")
  set_tests_properties(${name}_fixtures_setup PROPERTIES LABELS parity FIXTURES_SETUP ${name}_fixtures)
endfunction()
