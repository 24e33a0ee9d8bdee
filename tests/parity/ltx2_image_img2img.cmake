# ltx2_image img2img (DEVAIEXP LTX2ImageImg2ImgPipeline) against the reference composed from diffusers 0.42.1's
# modules (tools/reference/ltx2_image_img2img_fixtures.py, which imports ltx2_image_fixtures.py's tiny checkpoint
# builders and checks the composition bitwise against the original's order of operations): strengths 0.2 and 0.6,
# 8 steps. Fixtures are generated into the build tree, never committed.
if(TARGET ddo_ltx2_image)
  set(LTX2_IMAGE_IMG2IMG_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_image_img2img)
  ddo_reference_fixtures(ltx2_image_img2img SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_img2img_fixtures.py
    DIR ${LTX2_IMAGE_IMG2IMG_FIXTURE_DIR} COMMENT "generating LTX-2 image img2img fixtures (composed diffusers reference)"
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_text_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/gemma3_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py)
  ddo_add_gtest(ltx2_image_img2img_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_img2img_parity_test.cpp
    LIBS ddo_ltx2_image ddo_core)
  target_compile_definitions(ltx2_image_img2img_parity_test PRIVATE
    LTX2_IMAGE_IMG2IMG_FIXTURE_DIR="${LTX2_IMAGE_IMG2IMG_FIXTURE_DIR}"
    LTX2_IMAGE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_image_img2img_parity_test linear)
  ddo_test_uses_aten(ltx2_image_img2img_parity_test)
endif()
