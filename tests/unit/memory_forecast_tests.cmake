# The model kit's memory forecast (ddo/model/memory_forecast.hpp, Note [Memory forecast]): the arithmetic on stated
# stages (rounding, weights, per-phase peaks, budgets, the first phase over one, what fits) and the counting CPU
# allocator's measurements (ddo/torch/allocation_meter.hpp) against tensors of known size; the scratch pool's replay.
if(TARGET ddo_model)
  ddo_add_gtest(memory_forecast_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_forecast_test.cpp
    LIBS ddo_model)
  ddo_test_uses_aten(memory_forecast_test)
  # The scratch pool's replay (ScratchPool::replay_peak) against the pool itself: internal to libddo_model.
  target_include_directories(memory_forecast_test PRIVATE ${PROJECT_SOURCE_DIR}/core/model/src)
endif()
