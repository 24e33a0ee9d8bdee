# ltx2 real-size structure test: the real LTX-2.3 transformer config (diffusers' convert_ltx2_to_diffusers.py,
# get_ltx2_transformer_config("2.3")) with num_layers = 2 and a synthetic (sparse, zero-filled) bf16 checkpoint of
# the real tensor shapes, run whole through the core offload engine's disk route (CPU transport, the built linear
# allocator plugin).
if(TARGET ddo_ltx2_dit)
  ddo_add_gtest(ltx2_structure_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_structure_test.cpp
    LIBS ddo_ltx2_dit)
  target_compile_definitions(ltx2_structure_test PRIVATE LTX2_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  ddo_test_uses_aten(ltx2_structure_test)
  add_dependencies(ltx2_structure_test linear)
endif()
