# qwen_image_21 from text: the Qwen3-VL text tower, the prompt template and drop, against transformers/diffusers
# (tools/reference/qwen_image_21_text_fixtures.py). Fixtures are generated into the build tree, never committed: by
# the build (target qwen_image_21_text_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
if(TARGET qwen_image_21_impl)
  set(QI21_TEXT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text)
  set(QI21_TEXT_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_text_fixtures.py)
  ddo_reference_fixtures(qwen_image_21_text SCRIPT ${QI21_TEXT_SCRIPT} DIR ${QI21_TEXT_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
    COMMENT "generating text-path fixtures with transformers + diffusers")
  ddo_add_gtest(qwen_image_21_text_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_text_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_text_parity_test PRIVATE QI21_TEXT_FIXTURE_DIR="${QI21_TEXT_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_text_parity_test linear)
  ddo_test_uses_aten(qwen_image_21_text_parity_test)
endif()
