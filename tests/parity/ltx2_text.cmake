# LTX-2's prompt encoder (ddo_ltx2_text: LTX2Pipeline.encode_prompt on the Gemma-3 tokenizer and text tower) against
# diffusers' own LTX2Pipeline.encode_prompt on a tiny LTX-2.0 checkpoint with its text encoder
# (tools/reference/ltx2_text_fixtures.py). Fixtures are generated into the build tree, never committed: by the build
# (target ltx2_text_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test. The test skips when
# the fixtures are missing.
if(TARGET ddo_ltx2_text)
  set(LTX2_TEXT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_text)
  ddo_reference_fixtures(ltx2_text SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_text_fixtures.py
    DIR ${LTX2_TEXT_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/gemma3_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py
    COMMENT "generating LTX-2 prompt-encoder fixtures with diffusers")
  ddo_add_gtest(ltx2_text_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_text_parity_test.cpp
    LIBS ddo_ltx2_text nlohmann_json::nlohmann_json)
  target_compile_definitions(ltx2_text_parity_test PRIVATE LTX2_TEXT_FIXTURE_DIR="${LTX2_TEXT_FIXTURE_DIR}"
    LTX2_TEXT_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_text_parity_test linear)
  ddo_test_uses_aten(ltx2_text_parity_test)
endif()
