# LTX-2 audio decode chain parity (audio VAE decoder, HiFi-GAN vocoder, BWE vocoder, latents -> waveform) against
# fixtures produced by diffusers (tools/reference/ltx2_audio_fixtures.py). The fixtures are generated into the build
# tree, never committed: by the build (target ltx2_audio_fixtures, part of ALL) and, if missing, by the ctest
# FIXTURES_SETUP test; without them the tests skip.
if(TARGET ddo_ltx2_audio)
  set(LTX2_AUDIO_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_audio)
  ddo_reference_fixtures(ltx2_audio SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_audio_fixtures.py
    DIR ${LTX2_AUDIO_FIXTURE_DIR} COMMENT "generating LTX-2 audio parity fixtures with diffusers")
  ddo_add_gtest(ltx2_audio_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_audio_parity_test.cpp
    LIBS ddo_ltx2_audio)
  target_compile_definitions(ltx2_audio_parity_test PRIVATE LTX2_AUDIO_FIXTURE_DIR="${LTX2_AUDIO_FIXTURE_DIR}")
  ddo_test_uses_aten(ltx2_audio_parity_test)
endif()
