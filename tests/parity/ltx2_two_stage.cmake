# The ltx2_video two-stage run (issue 28 item 3) against diffusers' documented distilled composition (LTX2Pipeline
# at half size -> LTX2LatentUpsamplePipeline -> LTX2Pipeline(latents=...) with the stage-2 sigmas; and the same with
# LTX2ImageToVideoPipeline) on a tiny LTX-2.3 checkpoint with a tiny x2 latent upsampler
# (tools/reference/ltx2_two_stage_fixtures.py). Fixtures are generated into the build tree, never committed.
if(TARGET ddo_ltx2_pipeline AND TARGET ddo_ltx2_upsampler)
  set(LTX2_TWO_STAGE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_two_stage)
  ddo_reference_fixtures(ltx2_two_stage SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_two_stage_fixtures.py
    DIR ${LTX2_TWO_STAGE_FIXTURE_DIR} COMMENT "generating LTX-2 two-stage fixtures with diffusers")
  ddo_add_gtest(ltx2_two_stage_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_two_stage_parity_test.cpp
    LIBS ddo_ltx2_pipeline ddo_ltx2_upsampler ddo_core)
  target_compile_definitions(ltx2_two_stage_parity_test PRIVATE
    LTX2_TWO_STAGE_FIXTURE_DIR="${LTX2_TWO_STAGE_FIXTURE_DIR}")
  ddo_test_uses_aten(ltx2_two_stage_parity_test)

  # Step caching on the two-stage composition (issue 41): diffusers' hooks per stage (the fixture script builds on
  # ltx2_video_cache_fixtures.py's wrapped blocks and probes); tests/e2e/ltx2_two_stage_cache_test.cpp runs ddo-host on it.
  ddo_reference_fixtures(ltx2_two_stage_cache SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_two_stage_cache_fixtures.py
    DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_two_stage_cache
    COMMENT "running diffusers' cache hooks on the tiny two-stage LTX-2 composition")
endif()
