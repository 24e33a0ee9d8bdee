# libddo_media: the MP4 (H.264 + AAC) and WAV writers, the probe and the decoders (no LibTorch, no fixtures: the
# clips are synthetic and checked against their own input after a round trip through FFmpeg's libraries).
if(TARGET ddo_media)
  ddo_add_gtest(media_writer_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/media_writer_test.cpp
    LIBS ddo_media ddo_core)
endif()
