# Tensor views over engine leases (libddo_torch) on the CPU transport: aliasing, dtypes and shapes,
# an ATen forward bitwise equal across routes, and the CUDA transport's refusal without a device.
if(TARGET ddo_torch)
  ddo_add_gtest(engine_torch_contract_tests LABELS contract
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_torch/tensor_views_test.cpp
    LIBS ddo_torch ddo_bench_synthetic)
  add_dependencies(engine_torch_contract_tests linear)
endif()
