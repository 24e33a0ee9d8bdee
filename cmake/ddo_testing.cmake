# ddo_add_gtest(<name> LABELS <label>... SOURCES ... [LIBS ...])
# Labels are the validation layers of docs/validation.md: unit, contract, parity, e2e, cuda,
# installed, abi. A GTEST_SKIP() is reported by ctest as "Skipped" (never as passed).
find_package(GTest REQUIRED)
include(GoogleTest)

function(ddo_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS;SOURCES;LIBS;ENVIRONMENT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${name} ${T_SOURCES})
  ddo_executable_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/bin)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${name} PRIVATE ddo_compile_options GTest::gtest GTest::gtest_main ${T_LIBS})
  target_compile_definitions(${name} PRIVATE
    DDO_SOURCE_DIR="${CMAKE_SOURCE_DIR}" DDO_BINARY_DIR="${CMAKE_BINARY_DIR}")
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
               ENVIRONMENT "${T_ENVIRONMENT}")
endfunction()
