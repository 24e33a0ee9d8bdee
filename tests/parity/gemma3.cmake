# Gemma-3 text path (LTX-2's prompt encoder) against transformers: the SentencePiece tokenizer (ddo_sentencepiece)
# and the text tower's hidden states (ddo_gemma3), fixtures of tools/reference/gemma3_fixtures.py, generated into
# the build tree, never committed: by the build (target gemma3_fixtures, part of ALL) and, if missing, by the ctest
# FIXTURES_SETUP test. The tests skip when the fixtures are missing.
if(TARGET ddo_gemma3 AND TARGET ddo_sentencepiece)
  set(GEMMA3_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/gemma3)
  set(GEMMA3_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/gemma3_fixtures.py)
  ddo_reference_fixtures(gemma3 SCRIPT ${GEMMA3_SCRIPT} DIR ${GEMMA3_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
    COMMENT "generating Gemma-3 fixtures with transformers + sentencepiece")
  ddo_add_gtest(sentencepiece_tokenizer_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/sentencepiece_tokenizer_parity_test.cpp
    LIBS ddo_sentencepiece nlohmann_json::nlohmann_json)
  target_compile_definitions(sentencepiece_tokenizer_parity_test PRIVATE GEMMA3_FIXTURE_DIR="${GEMMA3_FIXTURE_DIR}")
  ddo_add_gtest(gemma3_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/gemma3_parity_test.cpp
    LIBS ddo_gemma3 ddo_sentencepiece nlohmann_json::nlohmann_json)
  target_compile_definitions(gemma3_parity_test PRIVATE GEMMA3_FIXTURE_DIR="${GEMMA3_FIXTURE_DIR}"
    GEMMA3_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(gemma3_parity_test linear)
  ddo_test_uses_aten(gemma3_parity_test)
endif()
