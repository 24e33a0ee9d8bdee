# Engine pure logic: planner decisions under budgets, group splitting and layout, counters JSON.
ddo_add_gtest(engine_unit_tests LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/planner_test.cpp ${CMAKE_CURRENT_LIST_DIR}/engine/layout_test.cpp
  LIBS ddo_core)
