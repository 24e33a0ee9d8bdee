# The engine's CUDA transport (libddo_torch) under the contract (label cuda): payloads from every
# source, slot reuse after the compute-stream fence, close refusal while pending, event counters.
# And the engine staging contract on CUDA (CUDA-backend HostStaging: cuMemHostAlloc / cuMemHostRegister):
# staged routes bitwise equal to resident, registration off, pinned fallbacks, backend pairing; the cases
# are shared with tests/contract/engine/engine_staging_test.cpp (contract/engine/staging_cases.hpp).
# Without a usable device every test is skipped with the reason ("no CUDA device: ..."), never passed.
if(TARGET ddo_torch)
  ddo_add_gtest(engine_cuda_tests LABELS cuda
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/cuda_transport_test.cpp
    LIBS ddo_torch ddo_bench_synthetic)
  add_dependencies(engine_cuda_tests linear)
  ddo_add_gtest(engine_staging_cuda_tests LABELS cuda
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/engine_staging_cuda_test.cpp
    LIBS ddo_torch ddo_bench_synthetic)
  add_dependencies(engine_staging_cuda_tests linear)
endif()
