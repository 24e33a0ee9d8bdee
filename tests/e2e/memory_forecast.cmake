# Issue 42: the memory forecast (Note [Memory forecast]) through ddo-host on the parity fixtures of qwen_image_21,
# ltx2_video and ltx2_image: every forecast phase within the stated tolerance of its measured peak, --device-memory refusals and what
# fits, ddo-host plan and the machine profiles.
if(TARGET qwen_image_21 AND TARGET ltx2_video AND TARGET ltx2_image AND TARGET ddo-host)
  ddo_add_gtest(memory_forecast_e2e_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_forecast_test.cpp
    LIBS nlohmann_json::nlohmann_json)
  target_compile_definitions(memory_forecast_e2e_test PRIVATE
    QI21_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21"
    QI21_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text"
    LTX2_PIPELINE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_pipeline"
    LTX2_IMAGE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(memory_forecast_e2e_test ddo-host qwen_image_21 ltx2_video ltx2_image linear ltx2_pipeline_fixtures
    ltx2_image_fixtures)
  foreach(f qwen_image_21_fixtures qwen_image_21_text_fixtures)  # tests/parity/ (included before e2e)
    if(TARGET ${f})
      add_dependencies(memory_forecast_e2e_test ${f})
    endif()
  endforeach()
endif()
