# Warning and sanitizer flags shared by every ddo target.
add_library(ddo_compile_options INTERFACE)
target_compile_options(ddo_compile_options INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(DDO_FATAL_WARNINGS AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC only: the fuzz build (clang, tools/ddo fuzz) keeps its warnings as warnings. CI checks the build log instead
  # (tools/ddo, DDO_FAIL_ON_WARNINGS).
  target_compile_options(ddo_compile_options INTERFACE -Werror)
endif()
if(DDO_SANITIZE)
  # -fno-sanitize-recover=all: a UBSan report aborts the process (by default UBSan prints and carries on, and the
  # test would pass). docs/validation.md, "Sanitizers".
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  # Suppressions for third-party leaks and the sanitizers' default options (cmake/sanitizer_defaults.cpp), linked
  # into executables only.
  add_library(ddo_sanitizer_defaults OBJECT ${CMAKE_CURRENT_LIST_DIR}/sanitizer_defaults.cpp)
endif()
# Adds the sanitizer defaults to an executable (no-op without DDO_SANITIZE).
function(ddo_executable_defaults target)
  if(TARGET ddo_sanitizer_defaults)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:ddo_sanitizer_defaults>)
  endif()
endfunction()
