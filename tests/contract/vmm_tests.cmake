# vmm allocator contract on the host backend (label contract); the same source runs on CUDA under
# tests/cuda/vmm_tests.cmake.
ddo_add_gtest(vmm_contract_tests LABELS contract
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vmm_contract_test.cpp
  LIBS ddo_xxhash ${CMAKE_DL_LIBS})
target_include_directories(vmm_contract_tests PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
add_dependencies(vmm_contract_tests vmm)

# The seed's gate as the probe prints it (exit 0 only when every check passed).
add_test(NAME vmm_probe_gate_host COMMAND ddo-vmm-probe --backend host)
set_tests_properties(vmm_probe_gate_host PROPERTIES LABELS contract TIMEOUT 120)
ddo_label_depends(contract ddo-vmm-probe)

# Host staging routes on the host backend (mlock); the CUDA instance is in tests/cuda/vmm_tests.cmake.
ddo_add_gtest(host_staging_contract_tests LABELS contract
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_staging_test.cpp
  LIBS ddo_core)
