# The model kit's step cache (ddo/model/step_cache.hpp, Note [Step caching]) on synthetic block stacks: decisions,
# skips, settings refused with the key named, diffusers' nearest_interp.
if(TARGET ddo_model)
  ddo_add_gtest(step_cache_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_cache_test.cpp
    LIBS ddo_model)
  ddo_test_uses_aten(step_cache_test)
endif()
