# ddo-host --plugin ltx2 on the pipeline fixtures (tools/reference/ltx2_pipeline_fixtures.py): MP4 + WAV outputs as
# a player sees them, the report's routes, unloads and owners, route equality, malformed checkpoints (exit 4) and
# refusals (exit 2).
if(TARGET ltx2_video AND TARGET ddo-host AND TARGET ddo_media AND DDO_PYTHON)
  ddo_add_gtest(ltx2_video_test LABELS e2e TIMEOUT 1200
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_test.cpp
    LIBS ddo_model ddo_media)
  target_compile_definitions(ltx2_video_test PRIVATE
    LTX2_PIPELINE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_pipeline"
    LTX2_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_text" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(ltx2_video_test)
  add_dependencies(ltx2_video_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_pipeline_fixtures ltx2_text_fixtures)
endif()

# ddo-host --plugin ltx2 --transformer FILE (Note [Component files]): Lightricks' single-file layout (original LTX
# names under model.diffusion_model., scaled fp8, the connectors inside, a VAE beside) equals the fp8 folder form.
if(TARGET ltx2_video AND TARGET ddo-host AND DDO_PYTHON)
  set(LTX2_SINGLE_FILE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_single_file)
  ddo_reference_fixtures(ltx2_single_file SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_single_file_fixtures.py
    DIR ${LTX2_SINGLE_FILE_FIXTURE_DIR} COMMENT "writing LTX-2 transformers in the original single-file layout")
  ddo_add_gtest(ltx2_component_file_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_component_file_test.cpp
    LIBS ddo_core nlohmann_json::nlohmann_json)
  target_compile_definitions(ltx2_component_file_test PRIVATE
    LTX2_SINGLE_FILE_FIXTURE_DIR="${LTX2_SINGLE_FILE_FIXTURE_DIR}" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(ltx2_component_file_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_single_file_fixtures)
endif()

# ddo-host --plugin ltx2 from an image (issue 28): --image FILE / FILE@FRAME and the two-stage run from the PNG files
# through the whole chain against diffusers' waveforms (tools/reference/ltx2_conditioning_fixtures.py,
# ltx2_two_stage_fixtures.py); refusals (exit 2, report written).
if(TARGET ltx2_video AND TARGET ddo-host AND TARGET ddo_media AND DDO_PYTHON)
  ddo_add_gtest(ltx2_conditioning_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_conditioning_test.cpp
    LIBS ddo_model ddo_media)
  target_compile_definitions(ltx2_conditioning_test PRIVATE
    LTX2_CONDITIONING_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_conditioning"
    LTX2_TWO_STAGE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_two_stage" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(ltx2_conditioning_test)
  add_dependencies(ltx2_conditioning_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_conditioning_fixtures
    ltx2_two_stage_fixtures)
endif()

# ddo-host --plugin ltx2 on checkpoints of other configurations than the pipeline fixtures' (issue 40 items 7, 8;
# tools/reference/ltx2_checkpoint_fixtures.py): a VAE encoder the text-to-video run does not use, a Gemma-3 with
# attention biases on every route, an off-grid frame count, decode_timestep / decode_noise_scale; each against
# diffusers' LTX2Pipeline (WAV within 16-bit rounding, PNG frames within one 8-bit step, MP4 frame counts).
if(TARGET ltx2_video AND TARGET ddo-host AND TARGET ddo_media AND DDO_PYTHON)
  set(LTX2_CHECKPOINT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_checkpoint)
  ddo_reference_fixtures(ltx2_checkpoint SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_checkpoint_fixtures.py
    DIR ${LTX2_CHECKPOINT_FIXTURE_DIR} COMMENT "running LTX2Pipeline on tiny checkpoints of other configurations")
  ddo_add_gtest(ltx2_checkpoints_test LABELS e2e TIMEOUT 1200
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_checkpoints_test.cpp
    LIBS ddo_model ddo_media PNG::PNG)
  target_compile_definitions(ltx2_checkpoints_test PRIVATE
    LTX2_CHECKPOINT_FIXTURE_DIR="${LTX2_CHECKPOINT_FIXTURE_DIR}" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(ltx2_checkpoints_test)
  add_dependencies(ltx2_checkpoints_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_checkpoint_fixtures)
endif()

# --cache (issue 41) through ddo-host on the step-cache fixtures (tools/reference/ltx2_video_cache_fixtures.py): the
# per-step pattern of every cache context equals diffusers' hooks', the engine's skipped bytes, refusals.
if(TARGET ltx2_video AND TARGET ddo-host AND DDO_PYTHON AND TARGET ltx2_video_cache_fixtures)
  ddo_add_gtest(ltx2_video_cache_test LABELS e2e TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_cache_test.cpp
    LIBS ddo_model nlohmann_json::nlohmann_json)
  ddo_test_uses_aten(ltx2_video_cache_test)
  target_compile_definitions(ltx2_video_cache_test PRIVATE
    LTX2_VIDEO_CACHE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_video_cache" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(ltx2_video_cache_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_video_cache_fixtures)
endif()

# --cache on a two-stage run (issue 41) through ddo-host on tools/reference/ltx2_two_stage_cache_fixtures.py: each
# stage's pattern and the stage-2 latents equal diffusers' hooks per stage; stage 2 uncached below cache.min_steps.
if(TARGET ltx2_video AND TARGET ddo-host AND DDO_PYTHON AND TARGET ltx2_two_stage_cache_fixtures)
  ddo_add_gtest(ltx2_two_stage_cache_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_two_stage_cache_test.cpp
    LIBS ddo_model nlohmann_json::nlohmann_json)
  ddo_test_uses_aten(ltx2_two_stage_cache_test)
  target_compile_definitions(ltx2_two_stage_cache_test PRIVATE
    LTX2_TWO_STAGE_CACHE_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_two_stage_cache" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(ltx2_two_stage_cache_test ddo-host ltx2_video linear vmm ddo_manifest_main ltx2_two_stage_cache_fixtures)
endif()
