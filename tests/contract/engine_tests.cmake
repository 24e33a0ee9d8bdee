# Weight store (malformed safetensors, sharded index, diffusers layout, read modes) and the engine over
# the built linear allocator plugin (leases, fences, close refusal, prefetch order, bitwise routes), and the
# engine over HostStaging's host backend (pinned fallbacks, registration modes, pinning off, report fields).
ddo_add_gtest(engine_contract_tests LABELS contract
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/safetensors_test.cpp ${CMAKE_CURRENT_LIST_DIR}/engine/engine_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/engine/engine_staging_test.cpp ${CMAKE_CURRENT_LIST_DIR}/engine/engine_pin_off_test.cpp
  LIBS ddo_core ddo_bench_synthetic)
add_dependencies(engine_contract_tests linear)
