# ddo-host serve (issue 30) on the text fixtures' checkpoint, driven by curl: the job API, events, outputs, the
# OpenAI-compatible images API (pixels equal to the CLI's), bad requests, the token, the TTL, cancel, a full queue and
# the SIGTERM drain.
if(TARGET qwen_image_21 AND TARGET ddo-host AND TARGET qwen_image_21_text_fixtures)
  ddo_add_gtest(serve_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_test.cpp
    LIBS nlohmann_json::nlohmann_json PNG::PNG)
  target_compile_definitions(serve_test PRIVATE
    QI21_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(serve_test ddo-host qwen_image_21 linear ddo_manifest_main qwen_image_21_text_fixtures)
endif()
