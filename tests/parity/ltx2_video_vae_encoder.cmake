# LTX-2 video VAE encoder parity (AutoencoderKLLTX2Video.encode + the mode: one frame, several frames, 2.0-like /
# 2.3-like / odd configs; the pipelines' normalisation; spatial tiles; leaf_offload through the engine; config and
# checkpoint errors) against fixtures produced by diffusers (tools/reference/ltx2_video_vae_encoder_fixtures.py).
# The fixtures are generated into the build tree, never committed: by the build (target
# ltx2_video_vae_encoder_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test; without them the
# parity tests skip.
if(TARGET ddo_ltx2_video_vae)
  set(LTX2_VIDEO_VAE_ENCODER_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_video_vae_encoder)
  ddo_reference_fixtures(ltx2_video_vae_encoder
    SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_video_vae_encoder_fixtures.py
    DIR ${LTX2_VIDEO_VAE_ENCODER_FIXTURE_DIR} COMMENT "generating LTX-2 video VAE encoder parity fixtures with diffusers")
  ddo_add_gtest(ltx2_video_vae_encoder_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_video_vae_encoder_parity_test.cpp
    LIBS ddo_ltx2_video_vae)
  target_compile_definitions(ltx2_video_vae_encoder_parity_test PRIVATE
    LTX2_VIDEO_VAE_ENCODER_FIXTURE_DIR="${LTX2_VIDEO_VAE_ENCODER_FIXTURE_DIR}"
    LTX2_VIDEO_VAE_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins"
    # The conditioning fixtures' pipeline-encoded condition images (ltx2_conditioning.cmake), when built.
    LTX2_CONDITIONING_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_conditioning")
  add_dependencies(ltx2_video_vae_encoder_parity_test linear)
  ddo_test_uses_aten(ltx2_video_vae_encoder_parity_test)
endif()
