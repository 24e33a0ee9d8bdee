# qwen_image_21 parity ladder (models.md §7.3) against fixtures produced by diffusers
# (tools/reference/qwen_image_21_fixtures.py). The fixtures are generated into the build tree, never committed:
# by the build (target qwen_image_21_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
if(TARGET qwen_image_21_impl)
  set(QI21_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21)
  set(QI21_SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_fixtures.py)
  if(DDO_PYTHON)
    add_custom_command(
      OUTPUT ${QI21_FIXTURE_DIR}/reference.json
      COMMAND ${DDO_PYTHON} ${QI21_SCRIPT} ${QI21_FIXTURE_DIR}
      DEPENDS ${QI21_SCRIPT}
      COMMENT "qwen_image_21: generating parity fixtures with diffusers (${DDO_PYTHON})"
      VERBATIM)
    add_custom_target(qwen_image_21_fixtures ALL DEPENDS ${QI21_FIXTURE_DIR}/reference.json)
    add_test(NAME qwen_image_21_fixtures_setup
      COMMAND sh -c "test -f '${QI21_FIXTURE_DIR}/reference.json' || '${DDO_PYTHON}' '${QI21_SCRIPT}' '${QI21_FIXTURE_DIR}'")
    set_tests_properties(qwen_image_21_fixtures_setup PROPERTIES
      LABELS parity FIXTURES_SETUP qwen_image_21_fixtures)
  else()
    message(STATUS "ddo: DDO_PYTHON not set; qwen_image_21 parity fixtures are not generated (tests skip)")
  endif()
  ddo_add_gtest(qwen_image_21_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_parity_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_parity_test PRIVATE QI21_FIXTURE_DIR="${QI21_FIXTURE_DIR}"
    QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_parity_test linear)
  target_precompile_headers(qwen_image_21_parity_test PRIVATE <ATen/ATen.h>)
endif()
