# The model kit's condition images (ModelRun::condition_images, condition_image.hpp) on hand-made settings.
if(TARGET ddo_model AND TARGET ddo_media)
  find_package(ZLIB REQUIRED)
  ddo_add_gtest(condition_images_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/condition_images_test.cpp
    LIBS ddo_model ddo_media ddo_core ZLIB::ZLIB)
endif()
