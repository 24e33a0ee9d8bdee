# The Qwen3-VL text side with condition images against transformers 5.24 (tools/reference/qwen3_vl_text_fixtures.py):
# the Qwen2-VL image processor, the RGBA composite over white, the text tower fed the reference's vision features
# (M-RoPE positions, embeds at the image pads, deepstack). Fixtures are generated into the build tree, never committed.
if(TARGET ddo_text_models AND TARGET ddo_media)
  set(QWEN3_VL_TEXT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen3_vl_text)
  ddo_reference_fixtures(qwen3_vl_text SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen3_vl_text_fixtures.py
    DIR ${QWEN3_VL_TEXT_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_text_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
    COMMENT "generating Qwen3-VL text-side fixtures (image processor, text tower with images) with transformers")
  ddo_add_gtest(qwen3_vl_text_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen3_vl_text_parity_test.cpp
    LIBS ddo_text_models ddo_media)
  target_compile_definitions(qwen3_vl_text_parity_test PRIVATE QWEN3_VL_TEXT_FIXTURE_DIR="${QWEN3_VL_TEXT_FIXTURE_DIR}"
    QWEN3_VL_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen3_vl_text_parity_test linear)
  ddo_test_uses_aten(qwen3_vl_text_parity_test)
endif()
