# ddo_ltx2_pipeline: the LTX2Pipeline around the math (models.md §5.12): the checkpoint opened and cross-checked,
# latent geometry, seeded noise in the reference's draw order, packing and de-normalisation, guidance in x0 space,
# the denoising loop over the DiT, the memory forecast's stages (Note [Memory forecast]).
ddo_ltx2_part(ddo_ltx2_pipeline SOURCES
  src/video_model.cpp
  src/latents.cpp
  src/guidance.cpp
  src/video_conditions.cpp
  src/video_denoise.cpp
  src/video_two_stage.cpp
  src/memory_model.cpp
  LIBS ddo_ltx2_dit ddo_ltx2_video_vae ddo_ltx2_audio)
