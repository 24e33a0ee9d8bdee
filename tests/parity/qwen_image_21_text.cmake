# qwen_image_21 from text: the Qwen3-VL text tower, the prompt template and drop, against transformers/diffusers
# (tools/reference/qwen_image_21_text_fixtures.py). Fixtures are generated into the build tree, never committed: by
# the build (target qwen_image_21_text_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
if(TARGET qwen_image_21_impl)
  set(QI21_TEXT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text)
  set(QI21_TEXT_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_text_fixtures.py)
  set(QI21_TEXT_DEPS ${QI21_TEXT_SCRIPT} ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py
      ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py)
  if(DDO_PYTHON)
    add_custom_command(
      OUTPUT ${QI21_TEXT_FIXTURE_DIR}/reference.json
      COMMAND ${DDO_PYTHON} ${QI21_TEXT_SCRIPT} ${QI21_TEXT_FIXTURE_DIR}
      DEPENDS ${QI21_TEXT_DEPS}
      COMMENT "qwen_image_21: generating text-path fixtures with transformers + diffusers (${DDO_PYTHON})"
      VERBATIM)
    add_custom_target(qwen_image_21_text_fixtures ALL DEPENDS ${QI21_TEXT_FIXTURE_DIR}/reference.json)
    add_test(NAME qwen_image_21_text_fixtures_setup
      COMMAND sh -c "test -f '${QI21_TEXT_FIXTURE_DIR}/reference.json' || '${DDO_PYTHON}' '${QI21_TEXT_SCRIPT}' '${QI21_TEXT_FIXTURE_DIR}'")
    set_tests_properties(qwen_image_21_text_fixtures_setup PROPERTIES
      LABELS parity FIXTURES_SETUP qwen_image_21_text_fixtures)
  endif()
  ddo_add_gtest(qwen_image_21_text_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_text_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_text_parity_test PRIVATE QI21_TEXT_FIXTURE_DIR="${QI21_TEXT_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_text_parity_test linear)
  target_precompile_headers(qwen_image_21_text_parity_test PRIVATE <ATen/ATen.h>)
endif()
