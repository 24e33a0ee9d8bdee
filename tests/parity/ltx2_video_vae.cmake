# LTX-2 video VAE decoder parity (AutoencoderKLLTX2Video.decode: resident, leaf_offload through the engine, tiled,
# temporal_stream, both combined; the `auto` choice; checkpoint errors) against fixtures produced by diffusers
# (tools/reference/ltx2_video_vae_fixtures.py). The fixtures are generated into the build tree, never committed: by
# the build (target ltx2_video_vae_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test; without
# them the parity tests skip.
if(TARGET ddo_ltx2_video_vae)
  set(LTX2_VIDEO_VAE_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_video_vae)
  ddo_reference_fixtures(ltx2_video_vae SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_video_vae_fixtures.py
    DIR ${LTX2_VIDEO_VAE_FIXTURE_DIR} COMMENT "generating LTX-2 video VAE parity fixtures with diffusers")
  ddo_add_gtest(ltx2_video_vae_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_vae_parity_test.cpp
    LIBS ddo_ltx2_video_vae)
  target_compile_definitions(ltx2_video_vae_parity_test PRIVATE
    LTX2_VIDEO_VAE_FIXTURE_DIR="${LTX2_VIDEO_VAE_FIXTURE_DIR}"
    LTX2_VIDEO_VAE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(ltx2_video_vae_parity_test linear)
  ddo_test_uses_aten(ltx2_video_vae_parity_test)
endif()
