# libddo_media's image input (read_image refusals on files the test writes, EXIF orientation, the H.264 round trip);
# parity with Pillow is tests/parity/image_input.cmake.
if(TARGET ddo_media)
  find_package(ZLIB REQUIRED)
  ddo_add_gtest(image_input_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/image_input_test.cpp
    LIBS ddo_media ddo_core ZLIB::ZLIB)
endif()
