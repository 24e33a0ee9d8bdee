# ddo-host serve (issue 30) on the text fixtures' checkpoint, driven by curl: the job API, events, outputs, the
# OpenAI-compatible images API (pixels equal to the CLI's), bad requests, the token, the TTL, cancel, a full queue,
# the SIGTERM drain, and a restart after SIGKILL on the same state directory.
if(TARGET qwen_image_21 AND TARGET ddo-host AND TARGET qwen_image_21_text_fixtures)
  ddo_add_gtest(serve_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_test.cpp
    LIBS nlohmann_json::nlohmann_json PNG::PNG)
  target_compile_definitions(serve_test PRIVATE
    QI21_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text"
    QI21_REF_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_reference" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(serve_test ddo-host qwen_image_21 linear ddo_manifest_main qwen_image_21_text_fixtures)
  if(TARGET qwen_image_21_reference_fixtures)  # ConditionImagesFromTheRequest (skipped without them)
    add_dependencies(serve_test qwen_image_21_reference_fixtures)
  endif()
  target_compile_definitions(serve_test PRIVATE LTX2_IMAGE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image")
  if(TARGET ltx2_image AND TARGET ltx2_image_fixtures)  # Ltx2ImageKeepsGemmaEmbeddingsAndTheDit (skipped without)
    add_dependencies(serve_test ltx2_image ltx2_image_fixtures)
  endif()
endif()

# The page at / in headless Chromium over the DevTools pipe (skipped, exit 77, without it): submit, the progress bar
# through every step, the image, the report summary; the screenshot goes to build/test-artifacts/serve_page.png.
if(TARGET qwen_image_21 AND TARGET ddo-host AND TARGET qwen_image_21_text_fixtures)
  add_test(NAME serve_page_test
    COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/serve_page_test.py $<TARGET_FILE:ddo-host>
            ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text/checkpoint ${CMAKE_BINARY_DIR}/test-artifacts)
  set_tests_properties(serve_page_test PROPERTIES LABELS e2e TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
