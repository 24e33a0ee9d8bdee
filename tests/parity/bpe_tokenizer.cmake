# ddo_tokenizers (byte-level BPE of a tokenizer.json) against the Python `tokenizers` library: fixtures produced by
# tools/reference/tokenizer_fixtures.py, generated into the build tree, never committed: by the build (target
# bpe_tokenizer_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test. The parity tests skip when
# the fixtures are missing; the unit tests (refusals, token_id) write their own small tokenizer.json files.
if(TARGET ddo_tokenizers)
  set(BPE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/tokenizer)
  set(BPE_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/tokenizer_fixtures.py)
  ddo_reference_fixtures(bpe_tokenizer SCRIPT ${BPE_SCRIPT} DIR ${BPE_FIXTURE_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
    COMMENT "generating parity fixtures with tokenizers")
  ddo_add_gtest(bpe_tokenizer_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer_parity_test.cpp
    LIBS ddo_tokenizers nlohmann_json::nlohmann_json)
  target_compile_definitions(bpe_tokenizer_parity_test PRIVATE BPE_FIXTURE_DIR="${BPE_FIXTURE_DIR}")
endif()
