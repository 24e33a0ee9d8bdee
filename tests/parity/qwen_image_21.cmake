# qwen_image_21 parity ladder (models.md §7.3) against fixtures produced by diffusers
# (tools/reference/qwen_image_21_fixtures.py). The fixtures are generated into the build tree, never committed:
# by the build (target qwen_image_21_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
if(TARGET qwen_image_21_impl)
  set(QI21_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21)
  set(QI21_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py)
  ddo_reference_fixtures(qwen_image_21 SCRIPT ${QI21_SCRIPT} DIR ${QI21_FIXTURE_DIR}
    COMMENT "generating parity fixtures with diffusers")
  ddo_add_gtest(qwen_image_21_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_parity_test PRIVATE QI21_FIXTURE_DIR="${QI21_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_parity_test linear)
  ddo_test_uses_aten(qwen_image_21_parity_test)
endif()

# The same pipeline on quantized transformers (issue 26): SDNQ int8, SDNQ uint4 + SVD (diffusers' SDNQ integration)
# and scaled fp8 (tools/reference/qwen_image_21_quant_fixtures.py, which builds on qwen_image_21_fixtures.py).
if(TARGET qwen_image_21_impl)
  set(QI21Q_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_quant)
  ddo_reference_fixtures(qwen_image_21_quant SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_quant_fixtures.py
    DIR ${QI21Q_FIXTURE_DIR} COMMENT "quantizing the tiny transformer with sdnq and fp8 and running diffusers on it")
  ddo_add_gtest(qwen_image_21_quant_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_quant_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_quant_parity_test PRIVATE QI21Q_FIXTURE_DIR="${QI21Q_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_quant_parity_test linear)
  ddo_test_uses_aten(qwen_image_21_quant_parity_test)
endif()

# Step caching (FirstBlockCache, MagCache, TaylorSeerCache) against diffusers 0.42.1's own cache hooks on the same tiny pipeline
# (tools/reference/qwen_image_21_cache_fixtures.py, which builds on qwen_image_21_fixtures.py).
if(TARGET qwen_image_21_impl)
  set(QI21C_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_cache)
  ddo_reference_fixtures(qwen_image_21_cache SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_cache_fixtures.py
    DIR ${QI21C_FIXTURE_DIR} DEPENDS ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py
    COMMENT "running diffusers' FirstBlockCache, MagCache and TaylorSeer hooks on the tiny pipeline")
  ddo_add_gtest(qwen_image_21_cache_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_cache_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_cache_parity_test PRIVATE QI21C_FIXTURE_DIR="${QI21C_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_cache_parity_test linear)
  ddo_test_uses_aten(qwen_image_21_cache_parity_test)
endif()
