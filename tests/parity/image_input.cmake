# Image input of the model kit (core/media: read_image, resize_like_pil, resize_like_vae_image_processor) against
# Pillow and diffusers' VideoProcessor (tools/reference/image_input_fixtures.py). Fixtures are generated into the
# build tree; without them the tests skip.
if(TARGET ddo_media)
  set(IMAGE_INPUT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/image_input)
  ddo_reference_fixtures(image_input SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/image_input_fixtures.py
    DIR ${IMAGE_INPUT_FIXTURE_DIR} COMMENT "generating image input fixtures with Pillow and diffusers")
  ddo_add_gtest(image_input_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/image_input_parity_test.cpp
    LIBS ddo_media ddo_core)
  target_compile_definitions(image_input_parity_test PRIVATE IMAGE_INPUT_FIXTURE_DIR="${IMAGE_INPUT_FIXTURE_DIR}")
endif()
