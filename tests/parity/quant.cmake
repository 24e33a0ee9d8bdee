# Dequantization parity (issue 26): ddo's GGML and fp8 decoders (core/torch/quant) against gguf-py and TorchAO on files
# those packages wrote (tools/reference/quant_fixtures.py), generated into the build tree, never committed.
if(TARGET ddo_model)
  set(QUANT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/quant)
  ddo_reference_fixtures(quant SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/quant_fixtures.py
    DIR ${QUANT_FIXTURE_DIR} COMMENT "writing quantized files with gguf-py and torchao")
  ddo_add_gtest(quant_dequant_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/quant_dequant_parity_test.cpp
    LIBS ddo_model ddo_bench_synthetic)
  target_compile_definitions(quant_dequant_parity_test PRIVATE QUANT_FIXTURE_DIR="${QUANT_FIXTURE_DIR}")
  ddo_test_uses_aten(quant_dequant_parity_test)
endif()
