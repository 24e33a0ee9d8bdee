# LTX-2 latent upsampler parity (LTX2LatentUpsamplerModel: plain x2, rational x2 / x1.5, temporal, spatiotemporal;
# the two-stage latent chain of LTX2LatentUpsamplePipeline with the VAE stats; resident and through the engine;
# config / checkpoint / VAE-fit errors) against fixtures produced by diffusers
# (tools/reference/ltx2_upsampler_fixtures.py). Generated into the build tree, never committed; without them the
# parity tests skip.
if(TARGET ddo_ltx2_upsampler)
  set(LTX2_UPSAMPLER_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_upsampler)
  ddo_reference_fixtures(ltx2_upsampler SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_upsampler_fixtures.py
    DIR ${LTX2_UPSAMPLER_FIXTURE_DIR} COMMENT "generating LTX-2 latent upsampler parity fixtures with diffusers")
  ddo_add_gtest(ltx2_upsampler_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_upsampler_parity_test.cpp
    LIBS ddo_ltx2_upsampler)
  target_compile_definitions(ltx2_upsampler_parity_test PRIVATE
    LTX2_UPSAMPLER_FIXTURE_DIR="${LTX2_UPSAMPLER_FIXTURE_DIR}"
    LTX2_UPSAMPLER_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_upsampler_parity_test linear)
  ddo_test_uses_aten(ltx2_upsampler_parity_test)
endif()
