# Plugin loader (issue 2): manifest, digests, search path, registry refusals, and the CLI.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
ddo_add_gtest(plugin_unit_tests LABELS unit
  SOURCES ${_dir}/file_digest_test.cpp ${_dir}/artifact_manifest_test.cpp ${_dir}/plugin_search_path_test.cpp
          ${_dir}/plugin_registry_test.cpp
  LIBS ddo_core OpenSSL::Crypto ddo_xxhash ${CMAKE_DL_LIBS})
ddo_add_gtest(plugin_cli_tests LABELS unit e2e
  SOURCES ${_dir}/plugin_cli_test.cpp
  LIBS ddo_core)
# The tests read the fixture group's plugins and manifest, and drive the built ddo-host.
add_dependencies(plugin_unit_tests ddo_manifest_fixtures)
add_dependencies(plugin_cli_tests ddo-host ddo_manifest_fixtures)
