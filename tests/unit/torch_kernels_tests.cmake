# LibTorch helpers of libddo_torch on the CPU: ddo::torch::conv3d (Note [Conv3d weight reorder]).
if(TARGET ddo_torch)
  ddo_add_gtest(conv3d_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/conv3d_test.cpp
    LIBS ddo_torch)
  ddo_test_uses_aten(conv3d_test)
endif()
