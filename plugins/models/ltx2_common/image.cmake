# ddo_ltx2_image: the LTX-2.3 image-only variant (models.md §6) on the shared LTX-2 math: the audio-less DiT
# (LTX2ImageTransformer2DModel: the video stream of the 2.3 DiT, one frame), the video-only text connectors
# (LTX2ImageTextConnectors), the checkpoint opened and cross-checked, and the image pipeline (schedule, CFG / PAG in
# x0 space with rescale, Euler steps, frame-0 decode) and its memory forecast's stages (src/image_*.{hpp,cpp}).
ddo_ltx2_part(ddo_ltx2_image SOURCES
  src/image_transformer.cpp
  src/image_connectors.cpp
  src/image_pipeline.cpp
  src/image_memory_model.cpp
  LIBS ddo_ltx2_pipeline)
