# ddo-host --plugin ltx2 on the pipeline fixtures (tools/reference/ltx2_pipeline_fixtures.py): MP4 + WAV outputs as
# a player sees them, the report's routes, unloads and owners, route equality, malformed checkpoints (exit 4) and
# refusals (exit 2).
if(TARGET ltx2_video AND TARGET ddo-host AND TARGET ddo_media AND DDO_PYTHON)
  ddo_add_gtest(ltx2_video_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_test.cpp
    LIBS ddo_model ddo_media)
  target_compile_definitions(ltx2_video_test PRIVATE
    LTX2_PIPELINE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_pipeline"
    LTX2_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_text" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  target_precompile_headers(ltx2_video_test PRIVATE <ATen/ATen.h>)
  add_dependencies(ltx2_video_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_pipeline_fixtures ltx2_text_fixtures)
endif()
