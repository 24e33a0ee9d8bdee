# Weight store helpers that need no LibTorch: checkpoint identity (header hashes, --hash-weights).
ddo_add_gtest(checkpoint_identity_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_identity_test.cpp
  LIBS ddo_core)
# The engine's bulk copy (non-temporal stores above 1 MiB): exact bytes, nothing outside the destination.
ddo_add_gtest(stream_copy_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stream_copy_test.cpp
  LIBS ddo_core)
# The GGUF header validation and the GGML type table (issue 26): valid files, and every kind of bad one refused.
ddo_add_gtest(gguf_header_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_header_test.cpp
  LIBS ddo_core)
# The SDNQ quantization_config reader (issue 26): per-layer rules and refusals.
ddo_add_gtest(sdnq_config_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sdnq_config_test.cpp
  LIBS ddo_core)
# The LoRA reader (issue 27): key families into one canonical form, the scale rule, matching, refusals.
ddo_add_gtest(lora_file_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/lora_file_test.cpp
  LIBS ddo_core ddo_bench_synthetic)
