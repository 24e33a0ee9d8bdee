# ctest -L installed: the tree `cmake --install` lays out, used with the source and build trees out of reach
# (tests/installed/installed_test.sh). The steps share a work directory outside the build tree; install is the
# setup fixture, cleanup the cleanup.
if(TARGET ddo_model AND TARGET qwen_image_21 AND DDO_PYTHON)
  string(MD5 _ddo_build_id "${CMAKE_BINARY_DIR}")
  string(SUBSTRING "${_ddo_build_id}" 0 12 _ddo_build_id)
  set(_work "/tmp/ddo_installed_${_ddo_build_id}")
  set(_script ${CMAKE_CURRENT_LIST_DIR}/installed_test.sh)
  foreach(step install verify demo example tamper cleanup)
    add_test(NAME installed_${step}
      COMMAND bash ${_script} ${step} ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${_work} ${DDO_PYTHON})
    set_tests_properties(installed_${step} PROPERTIES LABELS installed TIMEOUT 600 SKIP_RETURN_CODE 77
      RESOURCE_LOCK ddo_installed_tree)
  endforeach()
  set_tests_properties(installed_install PROPERTIES FIXTURES_SETUP ddo_installed FIXTURES_REQUIRED qwen_image_21_fixtures)
  set_tests_properties(installed_verify installed_demo installed_example PROPERTIES FIXTURES_REQUIRED ddo_installed)
  set_tests_properties(installed_tamper PROPERTIES FIXTURES_REQUIRED "ddo_installed;ddo_installed_example")
  set_tests_properties(installed_example PROPERTIES FIXTURES_SETUP ddo_installed_example)
  set_tests_properties(installed_cleanup PROPERTIES FIXTURES_CLEANUP "ddo_installed;ddo_installed_example")
endif()
