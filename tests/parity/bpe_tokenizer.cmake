# ddo_tokenizers (byte-level BPE of a tokenizer.json) against the Python `tokenizers` library: fixtures produced by
# tools/reference/tokenizer_fixtures.py, generated into the build tree, never committed: by the build (target
# bpe_tokenizer_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test. The parity tests skip when
# the fixtures are missing; the unit tests (refusals, token_id) write their own small tokenizer.json files.
if(TARGET ddo_tokenizers)
  set(BPE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/tokenizer)
  set(BPE_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/tokenizer_fixtures.py)
  if(DDO_PYTHON)
    add_custom_command(
      OUTPUT ${BPE_FIXTURE_DIR}/reference.json
      COMMAND ${DDO_PYTHON} ${BPE_SCRIPT} ${BPE_FIXTURE_DIR}
      DEPENDS ${BPE_SCRIPT} ${CMAKE_SOURCE_DIR}/tools/reference/tiny_qwen_tokenizer.py
      COMMENT "bpe_tokenizer: generating parity fixtures with tokenizers (${DDO_PYTHON})"
      VERBATIM)
    add_custom_target(bpe_tokenizer_fixtures ALL DEPENDS ${BPE_FIXTURE_DIR}/reference.json)
    add_test(NAME bpe_tokenizer_fixtures_setup
      COMMAND sh -c "test -f '${BPE_FIXTURE_DIR}/reference.json' || '${DDO_PYTHON}' '${BPE_SCRIPT}' '${BPE_FIXTURE_DIR}'")
    set_tests_properties(bpe_tokenizer_fixtures_setup PROPERTIES
      LABELS parity FIXTURES_SETUP bpe_tokenizer_fixtures)
  else()
    message(STATUS "ddo: DDO_PYTHON not set; bpe_tokenizer parity fixtures are not generated (tests skip)")
  endif()
  ddo_add_gtest(bpe_tokenizer_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer_parity_test.cpp
    LIBS ddo_tokenizers nlohmann_json::nlohmann_json)
  target_compile_definitions(bpe_tokenizer_parity_test PRIVATE BPE_FIXTURE_DIR="${BPE_FIXTURE_DIR}")
endif()
