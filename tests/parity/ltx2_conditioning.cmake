# LTX-2 image conditioning (issue 28) against diffusers' LTX2ImageToVideoPipeline and LTX2ConditionPipeline on the
# tiny LTX-2.0 / LTX-2.3 checkpoints (tools/reference/ltx2_conditioning_fixtures.py, which imports
# ltx2_pipeline_fixtures.py): denoised latents, frames and waveform from the reference's condition latents, and the
# DiT's routes. Fixtures are generated into the build tree, never committed.
if(TARGET ddo_ltx2_pipeline)
  set(LTX2_CONDITIONING_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_conditioning)
  ddo_reference_fixtures(ltx2_conditioning SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_conditioning_fixtures.py
    DIR ${LTX2_CONDITIONING_FIXTURE_DIR} COMMENT "generating LTX-2 image-conditioning fixtures with diffusers")
  ddo_add_gtest(ltx2_conditioning_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_conditioning_parity_test.cpp
    LIBS ddo_ltx2_pipeline ddo_core)
  target_compile_definitions(ltx2_conditioning_parity_test PRIVATE
    LTX2_CONDITIONING_FIXTURE_DIR="${LTX2_CONDITIONING_FIXTURE_DIR}"
    LTX2_CONDITIONING_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_conditioning_parity_test linear)
  ddo_test_uses_aten(ltx2_conditioning_parity_test)
endif()
