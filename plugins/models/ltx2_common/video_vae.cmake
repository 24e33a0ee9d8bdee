# The LTX-2 video VAE (AutoencoderKLLTX2Video) decoder and encoder and the decode strategies: config + state-dict
# specs, the shared layers, the decoder and encoder math, spatial tiles / temporal windows, and the `auto` choice
# (src/video_vae_*.{hpp,cpp}).
ddo_ltx2_part(ddo_ltx2_video_vae SOURCES
  src/video_vae_config.cpp src/video_vae_layers.cpp src/video_vae_decoder.cpp src/video_vae_encoder.cpp
  src/video_vae_tiling.cpp src/video_vae_choice.cpp)
