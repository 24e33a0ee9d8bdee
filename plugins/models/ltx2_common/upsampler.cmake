# ddo_ltx2_upsampler: the LTX-2 latent upsampler (LTX2LatentUpsamplerModel: config, state-dict spec and validation,
# the forward on ltx2::Weights) and the two-stage latent chain around it (de-normalise, upsample, optional AdaIN /
# tone mapping, normalise) (src/latent_upsampler*.{hpp,cpp}).
ddo_ltx2_part(ddo_ltx2_upsampler SOURCES src/latent_upsampler_config.cpp src/latent_upsampler.cpp
  LIBS ddo_ltx2_video_vae)
