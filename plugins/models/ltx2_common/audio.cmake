# LTX-2 audio decode chain (models.md §5.10-5.12): the audio VAE decoder (latents -> mel), the HiFi-GAN vocoder of
# LTX-2.0 and the bandwidth-extending vocoder of LTX-2.3 (mel -> waveform), with their config.json parsers.
ddo_ltx2_part(ddo_ltx2_audio SOURCES
  src/audio_vae_config.cpp
  src/audio_vae_decoder.cpp
  src/vocoder_config.cpp
  src/vocoder.cpp
  src/vocoder_bwe.cpp)
