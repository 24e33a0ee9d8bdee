# ltx2_image's pipeline from prompt embeddings against the composed LTX-2 image reference
# (tools/reference/ltx2_image_fixtures.py: diffusers 0.42.1's LTX-2 modules composed as the image variant, checked
# there against the original implementation's transformer on shared weights): distilled, base (CFG + rescale) and
# base + PAG, and base from a prompt (the tiny Gemma-3 of ltx2_text_fixtures.py, whose builders the script imports);
# base + PAG on quantized transformers (tools/reference/ltx2_image_quant_fixtures.py).
# Fixtures are generated into the build tree, never committed.
if(TARGET ddo_ltx2_image)
  set(LTX2_IMAGE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_image)
  ddo_reference_fixtures(ltx2_image SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_fixtures.py
    DIR ${LTX2_IMAGE_FIXTURE_DIR} COMMENT "generating LTX-2 image fixtures (composed diffusers reference)"
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_text_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/gemma3_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py)
  # The base + PAG case on SDNQ int8 / uint4 + SVD, scaled-fp8, GGUF Q8_0 and Q4_K transformers (issue 26).
  set(LTX2_IMAGE_QUANT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_image_quant)
  ddo_reference_fixtures(ltx2_image_quant SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_quant_fixtures.py
    DIR ${LTX2_IMAGE_QUANT_FIXTURE_DIR} COMMENT "quantizing the tiny LTX-2 image transformer with sdnq and gguf-py")
  ddo_add_gtest(ltx2_image_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_parity_test.cpp
    LIBS ddo_ltx2_image ddo_core)
  target_compile_definitions(ltx2_image_parity_test PRIVATE LTX2_IMAGE_FIXTURE_DIR="${LTX2_IMAGE_FIXTURE_DIR}"
    LTX2_IMAGE_QUANT_FIXTURE_DIR="${LTX2_IMAGE_QUANT_FIXTURE_DIR}"
    LTX2_IMAGE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_image_parity_test linear)
  ddo_test_uses_aten(ltx2_image_parity_test)
endif()

# Step caching (FirstBlockCache, MagCache, TaylorSeerCache) against diffusers 0.42.1's own cache hooks on the composed image pipeline
# (tools/reference/ltx2_image_cache_fixtures.py, which builds on ltx2_image_fixtures.py's components and registers
# the image block in diffusers' TransformerBlockRegistry).
if(TARGET ddo_ltx2_image)
  set(LTX2_IMAGE_CACHE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_image_cache)
  ddo_reference_fixtures(ltx2_image_cache SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_cache_fixtures.py
    DIR ${LTX2_IMAGE_CACHE_FIXTURE_DIR} COMMENT "running diffusers' FirstBlockCache, MagCache and TaylorSeer hooks on the LTX-2 image pipeline"
    DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_image_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_text_fixtures.py
            ${CMAKE_SOURCE_DIR}/tools/reference/gemma3_fixtures.py ${CMAKE_SOURCE_DIR}/tools/reference/tiny_gemma_tokenizer.py
            ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_pipeline_fixtures.py)
  ddo_add_gtest(ltx2_image_cache_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_image_cache_parity_test.cpp
    LIBS ddo_ltx2_image ddo_core)
  target_compile_definitions(ltx2_image_cache_parity_test PRIVATE
    LTX2_IMAGE_CACHE_FIXTURE_DIR="${LTX2_IMAGE_CACHE_FIXTURE_DIR}" LTX2_IMAGE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_image_cache_parity_test linear)
  ddo_test_uses_aten(ltx2_image_cache_parity_test)
endif()
