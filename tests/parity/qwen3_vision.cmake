# The Qwen3-VL vision tower (ddo_text_models, qwen3_vision_model.hpp) against transformers' Qwen3VLVisionModel
# (tools/reference/qwen3_vision_fixtures.py). Fixtures are generated into the build tree, never committed: by the
# build (target qwen3_vision_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test. The test
# skips when the fixtures are missing.
if(TARGET ddo_text_models)
  set(QWEN3_VISION_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen3_vision)
  ddo_reference_fixtures(qwen3_vision SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen3_vision_fixtures.py
    DIR ${QWEN3_VISION_FIXTURE_DIR}
    COMMENT "generating Qwen3-VL vision tower fixtures with transformers")
  ddo_add_gtest(qwen3_vision_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen3_vision_parity_test.cpp
    LIBS ddo_text_models nlohmann_json::nlohmann_json)
  target_compile_definitions(qwen3_vision_parity_test PRIVATE QWEN3_VISION_FIXTURE_DIR="${QWEN3_VISION_FIXTURE_DIR}"
    QWEN3_VISION_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen3_vision_parity_test linear)
  ddo_test_uses_aten(qwen3_vision_parity_test)
endif()
