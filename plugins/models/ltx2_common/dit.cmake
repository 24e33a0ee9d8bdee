# ddo_ltx2_dit: the LTX-2 DiT (LTX2VideoTransformer3DModel) and the text connectors (LTX2TextConnectors) in ATen
# (models.md §5.2-5.8): configs, RoPE, attention, the block-split transformer forward, the connectors forward.
ddo_ltx2_part(ddo_ltx2_dit SOURCES
  src/transformer_config.cpp
  src/rope.cpp
  src/attention.cpp
  src/transformer.cpp
  src/connectors.cpp
  src/original_names.cpp)
