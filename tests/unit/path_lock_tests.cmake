# Path locks (Note [Path locks]): the stale lock files a killed holder leaves, removed once no process holds them.
ddo_add_gtest(stale_path_locks_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stale_path_locks_test.cpp
  LIBS ddo_core)
