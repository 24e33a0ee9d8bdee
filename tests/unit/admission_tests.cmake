# Linux admission rules on fake /proc and /sys trees (core/include/ddo/platform/linux_admission.hpp).
ddo_add_gtest(admission_unit_tests LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admission_test.cpp
  LIBS ddo_core)
