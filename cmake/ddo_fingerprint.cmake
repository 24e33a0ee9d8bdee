# Build fingerprint: every plugin and the host are stamped with the same string; the host refuses a
# plugin whose fingerprint differs (docs/architecture.md, "Verification and loading order").
set(DDO_COMPILER "${CMAKE_CXX_COMPILER_ID}-${CMAKE_CXX_COMPILER_VERSION}")
set(DDO_BUILD_FINGERPRINT
    "core=${PROJECT_VERSION};torch=${DDO_TORCH_VERSION};cuda=${DDO_CUDA_VERSION};cc=${DDO_COMPILER}")
execute_process(COMMAND git -C ${CMAKE_SOURCE_DIR} rev-parse --short=12 HEAD
                OUTPUT_VARIABLE DDO_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT DDO_GIT_REVISION)
  set(DDO_GIT_REVISION "unknown")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/build_info.h.in ${CMAKE_BINARY_DIR}/generated/ddo/build_info.h @ONLY)
message(STATUS "ddo: fingerprint ${DDO_BUILD_FINGERPRINT}")
