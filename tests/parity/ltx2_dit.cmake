# LTX-2 DiT + text connectors parity ladder (models.md §7.3) against fixtures produced by diffusers
# (tools/reference/ltx2_dit_fixtures.py), generated into the build tree, never committed: by the build (target
# ltx2_dit_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test ltx2_dit_fixtures_setup.
if(TARGET ddo_ltx2_dit)
  set(LTX2_DIT_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_dit)
  ddo_reference_fixtures(ltx2_dit SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_dit_fixtures.py
    DIR ${LTX2_DIT_FIXTURE_DIR} COMMENT "generating LTX-2 DiT / connector parity fixtures with diffusers")
  ddo_add_gtest(ltx2_dit_parity_test LABELS parity
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/ltx2_dit_parity_test.cpp
    LIBS ddo_ltx2_dit)
  target_compile_definitions(ltx2_dit_parity_test PRIVATE LTX2_DIT_FIXTURE_DIR="${LTX2_DIT_FIXTURE_DIR}")
  ddo_test_uses_aten(ltx2_dit_parity_test)
endif()
