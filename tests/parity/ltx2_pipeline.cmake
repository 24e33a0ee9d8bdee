# ltx2_video's whole pipeline from prompt embeddings against diffusers' LTX2Pipeline on tiny LTX-2.0 and LTX-2.3
# checkpoints (tools/reference/ltx2_pipeline_fixtures.py): denoised latents (plain and fully guided), frames and
# waveform. Fixtures are generated into the build tree, never committed: by the build (target
# ltx2_pipeline_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
if(TARGET ddo_ltx2_pipeline)
  set(LTX2_PIPELINE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_pipeline)
  ddo_reference_fixtures(ltx2_pipeline SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py
    DIR ${LTX2_PIPELINE_FIXTURE_DIR} COMMENT "generating LTX-2 pipeline fixtures with diffusers")
  # The guided case on SDNQ int8 / uint4 + SVD, scaled-fp8, GGUF Q8_0 and (wide DiT) GGUF Q4_K transformers (issue 26).
  set(LTX2_QUANT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_quant)
  ddo_reference_fixtures(ltx2_quant SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_quant_fixtures.py
    DIR ${LTX2_QUANT_FIXTURE_DIR} COMMENT "quantizing the tiny LTX-2.3 transformer with sdnq and gguf-py")
  ddo_add_gtest(ltx2_pipeline_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_pipeline_parity_test.cpp
    LIBS ddo_ltx2_pipeline ddo_core)
  target_compile_definitions(ltx2_pipeline_parity_test PRIVATE LTX2_PIPELINE_FIXTURE_DIR="${LTX2_PIPELINE_FIXTURE_DIR}"
    LTX2_QUANT_FIXTURE_DIR="${LTX2_QUANT_FIXTURE_DIR}"
    LTX2_PIPELINE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_pipeline_parity_test linear)
  ddo_test_uses_aten(ltx2_pipeline_parity_test)
endif()

# Step caching (FirstBlockCache, MagCache, TaylorSeerCache) against diffusers 0.42.1's own cache hooks on LTX2Pipeline
# (tools/reference/ltx2_video_cache_fixtures.py, which builds on ltx2_pipeline_fixtures.py and wraps the dual-stream
# block so that the hooks read its streams by the names they use).
if(TARGET ddo_ltx2_pipeline)
  set(LTX2_VIDEO_CACHE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_video_cache)
  ddo_reference_fixtures(ltx2_video_cache SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_video_cache_fixtures.py
    DIR ${LTX2_VIDEO_CACHE_FIXTURE_DIR} DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_conditioning_fixtures.py
    COMMENT "running diffusers' FirstBlockCache, MagCache and TaylorSeer hooks on the tiny LTX2Pipeline")
  ddo_add_gtest(ltx2_video_cache_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_cache_parity_test.cpp
    LIBS ddo_ltx2_pipeline ddo_core)
  target_compile_definitions(ltx2_video_cache_parity_test PRIVATE
    LTX2_VIDEO_CACHE_FIXTURE_DIR="${LTX2_VIDEO_CACHE_FIXTURE_DIR}"
    LTX2_VIDEO_CACHE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_video_cache_parity_test linear)
  ddo_test_uses_aten(ltx2_video_cache_parity_test)
endif()
