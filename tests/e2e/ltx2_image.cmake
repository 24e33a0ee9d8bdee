# ddo-host --plugin ltx2_image on the image fixtures (tools/reference/ltx2_image_fixtures.py): the PNG from -p and
# from --prompt-embeds against the composed reference, the text encoder streamed and unloaded in phase encode,
# `ddo-host encode`, DiT route equality, malformed checkpoints (exit 4) and refusals (exit 2); and the real-size
# structure test: the real LTX-2.3 image DiT block shapes (2 blocks, a sparse zero-filled bf16 checkpoint) through
# the core offload engine's disk route (CPU transport, the built linear allocator plugin).
if(TARGET ltx2_image AND TARGET ddo-host AND TARGET ddo_ltx2_image AND DDO_PYTHON)
  ddo_add_gtest(ltx2_image_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_test.cpp
    LIBS ddo_model PNG::PNG)
  target_compile_definitions(ltx2_image_test PRIVATE
    LTX2_IMAGE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image"
    LTX2_PIPELINE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_pipeline" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(ltx2_image_test)
  add_dependencies(ltx2_image_test ddo-host ltx2_image linear vmm ddo_manifest_main ltx2_image_fixtures
    ltx2_pipeline_fixtures)
endif()
if(TARGET ddo_ltx2_image)
  ddo_add_gtest(ltx2_image_structure_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_structure_test.cpp
    LIBS ddo_ltx2_image)
  target_compile_definitions(ltx2_image_structure_test PRIVATE LTX2_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  ddo_test_uses_aten(ltx2_image_structure_test)
  add_dependencies(ltx2_image_structure_test linear)
endif()
# img2img (--image FILE --strength S) against tools/reference/ltx2_image_img2img_fixtures.py: the PNG at strengths
# 0.2 and 0.6, the report's image and img2img facts, DiT route equality, refusals (exit 2).
if(TARGET ltx2_image AND TARGET ddo-host AND TARGET ddo_ltx2_image AND DDO_PYTHON)
  ddo_add_gtest(ltx2_image_img2img_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_img2img_test.cpp
    LIBS ddo_model PNG::PNG)
  target_compile_definitions(ltx2_image_img2img_test PRIVATE
    LTX2_IMAGE_IMG2IMG_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image_img2img" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(ltx2_image_img2img_test)
  add_dependencies(ltx2_image_img2img_test ddo-host ltx2_image linear vmm ddo_manifest_main ltx2_image_img2img_fixtures)
endif()
# --cache (issue 41) through ddo-host on the step-cache fixtures (tools/reference/ltx2_image_cache_fixtures.py): the
# per-step pattern equals diffusers' hooks', the report, the engine's skipped bytes, calibration, refusals.
if(TARGET ltx2_image AND TARGET ddo-host AND TARGET ddo_ltx2_image AND DDO_PYTHON AND TARGET ltx2_image_cache_fixtures)
  ddo_add_gtest(ltx2_image_cache_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_cache_test.cpp
    LIBS nlohmann_json::nlohmann_json)
  target_compile_definitions(ltx2_image_cache_test PRIVATE
    LTX2_IMAGE_CACHE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image_cache"
    LTX2_IMAGE_IMG2IMG_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_image_img2img" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(ltx2_image_cache_test ddo-host ltx2_image linear vmm ddo_manifest_main ltx2_image_cache_fixtures
    ltx2_image_img2img_fixtures)
endif()
