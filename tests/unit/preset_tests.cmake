# Presets (issue 3): precedence, provenance, auto on faked platforms, located errors, host review commands.
ddo_add_gtest(preset_resolver_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/preset_resolver_test.cpp
  LIBS ddo_core)
ddo_add_gtest(preset_cli_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/preset_cli_test.cpp
  LIBS ddo_core)
add_dependencies(preset_cli_test ddo-host)
