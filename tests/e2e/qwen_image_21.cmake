# qwen_image_21 real-size structure test: the real Qwen-Image 2.1 transformer config with a synthetic
# (sparse, zero-filled) bf16 checkpoint of the real tensor shapes for 2 blocks, run through the disk route.
if(TARGET qwen_image_21_impl)
  ddo_add_gtest(qwen_image_21_structure_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_structure_test.cpp
    LIBS qwen_image_21_impl)
endif()
