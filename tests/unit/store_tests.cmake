# Weight store helpers that need no LibTorch: checkpoint identity (header hashes, --hash-weights).
ddo_add_gtest(checkpoint_identity_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_identity_test.cpp
  LIBS ddo_core)
# The engine's bulk copy (non-temporal stores above 1 MiB): exact bytes, nothing outside the destination.
ddo_add_gtest(stream_copy_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stream_copy_test.cpp
  LIBS ddo_core)
