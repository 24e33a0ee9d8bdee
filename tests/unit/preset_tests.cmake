# Presets (issue 3): precedence, provenance, auto on faked platforms, located errors.
# The host review commands (preset show/check/diff) are exercised in run_report_host_test.
ddo_add_gtest(preset_resolver_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/preset_resolver_test.cpp
  LIBS ddo_core)
