# Quantized text encoders (issue 26): the Qwen3-VL text tower of qwen_image_21 and the Gemma-3 text encoder of LTX-2
# stored as SDNQ (sdnq 0.2.8's save_sdnq_model), scaled fp8 and GGUF Q8_0 (gguf-py), against transformers on the
# weights their own packages decode (tools/reference/text_quant_fixtures.py, which builds on the text fixture
# scripts). Fixtures are generated into the build tree, never committed: by the build (target text_quant_fixtures,
# part of ALL) and, if missing, by the ctest FIXTURES_SETUP test. The tests skip when the fixtures are missing.
if(TARGET qwen_image_21_impl OR TARGET ddo_ltx2_text)
  set(TEXT_QUANT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/text_quant)
  ddo_reference_fixtures(text_quant SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/text_quant_fixtures.py
    DIR ${TEXT_QUANT_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
            ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
    COMMENT "quantizing the tiny text encoders with sdnq, fp8 and gguf-py and running transformers on them")
endif()

if(TARGET qwen_image_21_impl)
  ddo_add_gtest(qwen_image_21_text_quant_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_text_quant_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_text_quant_parity_test PRIVATE
    TEXT_QUANT_FIXTURE_DIR="${TEXT_QUANT_FIXTURE_DIR}" QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_text_quant_parity_test linear)
  ddo_test_uses_aten(qwen_image_21_text_quant_parity_test)
endif()

if(TARGET ddo_ltx2_text)
  ddo_add_gtest(ltx2_text_quant_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_text_quant_parity_test.cpp
    LIBS ddo_ltx2_text nlohmann_json::nlohmann_json)
  target_compile_definitions(ltx2_text_quant_parity_test PRIVATE
    TEXT_QUANT_FIXTURE_DIR="${TEXT_QUANT_FIXTURE_DIR}" LTX2_TEXT_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_text_quant_parity_test linear)
  ddo_test_uses_aten(ltx2_text_quant_parity_test)
endif()
