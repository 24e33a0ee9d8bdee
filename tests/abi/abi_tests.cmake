# ABI pins (issue 2): static_asserts on every ABI struct, C/C++ agreement, exported symbols.
ddo_add_gtest(abi_layout_tests LABELS abi
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/abi_layout_test.cpp ${CMAKE_CURRENT_LIST_DIR}/abi_headers_c.c)
target_include_directories(abi_layout_tests PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
add_dependencies(abi_layout_tests ddo_manifest_fixtures)  # builds every fixture plugin
