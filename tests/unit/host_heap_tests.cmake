# The C heap released between the pieces of a decode (platform/host_heap.hpp, Note [Host heap between pieces]).
ddo_add_gtest(host_heap_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_heap_test.cpp
  LIBS ddo_core)
