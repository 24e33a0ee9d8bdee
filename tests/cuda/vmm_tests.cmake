# The vmm allocator contract on the CUDA backend (label cuda). Without a usable device every test
# is skipped with the reason ("no CUDA device: ..."), never passed.
ddo_add_gtest(vmm_cuda_tests LABELS cuda
  SOURCES ${CMAKE_SOURCE_DIR}/tests/contract/vmm_contract_test.cpp
  LIBS ddo_core ddo_xxhash ${CMAKE_DL_LIBS})
target_compile_definitions(vmm_cuda_tests PRIVATE DDO_VMM_TEST_CUDA=1)
if(CUDAToolkit_FOUND)
  target_include_directories(vmm_cuda_tests PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(vmm_cuda_tests PRIVATE DDO_HAVE_CUDA_HEADERS=1)
endif()
add_dependencies(vmm_cuda_tests vmm)

# The gate on the CUDA backend; exit 4 (backend unavailable: no driver or device) is a skip.
add_test(NAME vmm_probe_gate_cuda COMMAND ddo-vmm-probe --backend cuda)
set_tests_properties(vmm_probe_gate_cuda PROPERTIES LABELS cuda TIMEOUT 120 SKIP_RETURN_CODE 4)

# Host staging routes on CUDA (cuMemHostAlloc / cuMemHostRegister); skipped without a device.
ddo_add_gtest(host_staging_cuda_tests LABELS cuda
  SOURCES ${CMAKE_SOURCE_DIR}/tests/contract/host_staging_test.cpp
  LIBS ddo_core)
target_compile_definitions(host_staging_cuda_tests PRIVATE DDO_STAGING_TEST_CUDA=1)
