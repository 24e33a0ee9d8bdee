# DDO_FUZZ=ON: a build of the libFuzzer targets only (tests/fuzz; docs/validation.md, "Fuzzing"). clang's libFuzzer
# with AddressSanitizer and UndefinedBehaviorSanitizer on every ddo source (-fsanitize=fuzzer-no-link: coverage for
# the fuzzer; the targets link -fsanitize=fuzzer). The targets need libddo_core, the BPE tokenizer and the report
# reader, nothing of LibTorch, CUDA, FFmpeg or the model plugins: those and the test suites are switched off.
# `tools/ddo fuzz` configures build-fuzz with this. Included by the top-level CMakeLists.txt before the dependencies.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ddo: DDO_FUZZ needs clang (libFuzzer), found ${CMAKE_CXX_COMPILER_ID}: configure a fresh build "
                      "directory with -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ (tools/ddo fuzz does)")
endif()
# Normal variables beat the cache and the later option() calls (CMP0077), whatever the cache holds.
foreach(_off DDO_WITH_TORCH DDO_WITH_MEDIA DDO_BUILD_TESTS DDO_SANITIZE)
  set(${_off} OFF)
endforeach()
message(STATUS "ddo: DDO_FUZZ: libFuzzer targets only (LibTorch, media, test suites and DDO_SANITIZE are off)")
# -O1 -g with assertions on (no NDEBUG): the JSON and TOML libraries' own checks stay armed. Any UBSan report aborts,
# so that libFuzzer records it as a crash.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
                    -O1 -g)
add_link_options(-fsanitize=address,undefined)
