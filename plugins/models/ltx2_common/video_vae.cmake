# The LTX-2 video VAE decoder (AutoencoderKLLTX2Video) and its decode strategies: config + state-dict spec, the
# decoder math, spatial tiles / temporal windows, and the `auto` choice (src/video_vae_*.{hpp,cpp}).
ddo_ltx2_part(ddo_ltx2_video_vae SOURCES
  src/video_vae_config.cpp src/video_vae_decoder.cpp src/video_vae_tiling.cpp src/video_vae_choice.cpp)
