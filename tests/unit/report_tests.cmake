# Run reports (issue 3): null-not-zero, nested phases, atomic writes, failed/interrupted runs,
# and the docs/metrics.md catalog against what a report emits.
ddo_add_gtest(run_tracker_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/run_tracker_test.cpp
  LIBS ddo_core)
add_executable(ddo_report_sigint_child ${CMAKE_CURRENT_LIST_DIR}/report_sigint_child.cpp)
target_link_libraries(ddo_report_sigint_child PRIVATE ddo_core ddo_compile_options)
set_target_properties(ddo_report_sigint_child PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/bin)
ddo_add_gtest(run_report_host_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/run_report_host_test.cpp
  LIBS ddo_core)
add_dependencies(run_report_host_test ddo-host ddo_report_sigint_child)
