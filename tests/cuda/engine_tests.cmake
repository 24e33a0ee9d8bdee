# The engine's CUDA transport (libddo_torch) under the contract (label cuda): payloads from every
# source, slot reuse after the compute-stream fence, close refusal while pending, event counters.
# Without a usable device every test is skipped with the reason ("no CUDA device: ..."), never passed.
if(TARGET ddo_torch)
  ddo_add_gtest(engine_cuda_tests LABELS cuda
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/cuda_transport_test.cpp
    LIBS ddo_torch ddo_bench_synthetic)
  add_dependencies(engine_cuda_tests linear)
endif()
