# qwen_image_21 with condition images: whole QwenImage21Pipeline(prompt=..., image=[...]) runs on a tiny checkpoint
# with its Qwen3-VL vision tower (tools/reference/qwen_image_21_reference_fixtures.py); the e2e test that compares
# ddo-host against them is tests/e2e/qwen_image_21.cmake's qwen_image_21_reference_test.
if(TARGET qwen_image_21_impl)
  ddo_reference_fixtures(qwen_image_21_reference
    SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_reference_fixtures.py
    DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_reference
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_text_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
    COMMENT "generating condition-image pipeline fixtures with transformers + diffusers")
endif()

if(TARGET qwen_image_21_impl AND TARGET qwen_image_21_reference_fixtures)
  ddo_add_gtest(qwen_image_21_reference_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_reference_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_reference_parity_test PRIVATE
    QI21_REF_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_reference"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_reference_parity_test linear qwen_image_21_reference_fixtures)
  ddo_test_uses_aten(qwen_image_21_reference_parity_test)
endif()
