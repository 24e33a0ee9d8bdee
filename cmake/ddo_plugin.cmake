# ddo_add_plugin(<name> KIND model|allocator SOURCES ... [LIBS ...] [GROUP <group>])
#
# Builds a plugin as a MODULE library with hidden visibility and a version script that exports only
# ddo_plugin_negotiate and ddo_plugin_get_vtable. Each plugin joins a manifest group; every group's
# directory gets an artifacts.toml (name, kind, file, size, sha256, platform, fingerprint) written
# after the build (see Note [Artifact manifest] in docs/architecture.md).
#
# Groups: "main" (build/lib/ddo/plugins) by default; tests declare their own with ddo_plugin_group().

define_property(GLOBAL PROPERTY DDO_PLUGIN_GROUPS BRIEF_DOCS "ddo plugin groups" FULL_DOCS "ddo")

function(ddo_plugin_group group)
  cmake_parse_arguments(G "" "DIR" "" ${ARGN})
  get_property(groups GLOBAL PROPERTY DDO_PLUGIN_GROUPS)
  if(NOT group IN_LIST groups)
    set_property(GLOBAL APPEND PROPERTY DDO_PLUGIN_GROUPS ${group})
  endif()
  set_property(GLOBAL PROPERTY DDO_GROUP_${group}_DIR ${G_DIR})
endfunction()

ddo_plugin_group(main DIR ${DDO_PLUGIN_OUTPUT_DIR})

function(ddo_add_plugin name)
  # NO_VERSION_SCRIPT: test fixtures only (a plugin missing an entry point must still link).
  cmake_parse_arguments(P "NO_MANIFEST;NO_VERSION_SCRIPT" "KIND;GROUP;OUTPUT_NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT P_KIND MATCHES "^(model|allocator)$")
    message(FATAL_ERROR "ddo_add_plugin(${name}): KIND must be model or allocator, got '${P_KIND}'")
  endif()
  if(NOT P_GROUP)
    set(P_GROUP main)
  endif()
  get_property(dir GLOBAL PROPERTY DDO_GROUP_${P_GROUP}_DIR)
  add_library(${name} MODULE ${P_SOURCES})
  if(NOT P_OUTPUT_NAME)
    set(P_OUTPUT_NAME "ddo_${P_KIND}_${name}")
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX "lib" OUTPUT_NAME ${P_OUTPUT_NAME}
    LIBRARY_OUTPUT_DIRECTORY ${dir}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    # No RPATH: a plugin is loaded through /proc/self/fd/N, where $ORIGIN names /proc/self/fd. Its libddo_* and
    # LibTorch dependencies resolve through ddo-host's DT_RPATH ($ORIGIN/../lib + LibTorch), the same in the build
    # and the installed tree, so the built bytes are the installed bytes. Note [Plugin dependencies].
    SKIP_BUILD_RPATH ON INSTALL_RPATH "")
  if(P_NO_VERSION_SCRIPT)
    target_link_options(${name} PRIVATE -Wl,-z,defs)
  else()
    target_link_options(${name} PRIVATE
      -Wl,--version-script=${CMAKE_SOURCE_DIR}/cmake/plugin_exports.map -Wl,-z,defs)
  endif()
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/core/include ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${name} PRIVATE ddo_compile_options ${P_LIBS})
  if(NOT P_NO_MANIFEST)
    set_property(GLOBAL APPEND PROPERTY DDO_GROUP_${P_GROUP}_ENTRIES "${name}|${P_KIND}|$<TARGET_FILE:${name}>")
    # The same entry with the file's path spelled out: a $<TARGET_FILE:> in a custom target's command would make that
    # target depend on the plugin (ddo_runtime_<model> must not build the other plugins).
    set_property(GLOBAL APPEND PROPERTY DDO_GROUP_${P_GROUP}_PATHS
      "${name}|${P_KIND}|${dir}/lib${P_OUTPUT_NAME}${CMAKE_SHARED_MODULE_SUFFIX}")
    set_property(GLOBAL APPEND PROPERTY DDO_GROUP_${P_GROUP}_TARGETS ${name})
  endif()
endfunction()

# Called once at the end of the top-level CMakeLists.txt: one manifest per group, written after the
# group's plugins are linked. Tests may post-edit a fixture group's manifest (see tests/fixtures).
function(ddo_write_artifact_manifest)
  get_property(groups GLOBAL PROPERTY DDO_PLUGIN_GROUPS)
  foreach(group IN LISTS groups)
    get_property(dir GLOBAL PROPERTY DDO_GROUP_${group}_DIR)
    get_property(entries GLOBAL PROPERTY DDO_GROUP_${group}_ENTRIES)
    get_property(targets GLOBAL PROPERTY DDO_GROUP_${group}_TARGETS)
    if(NOT targets)
      continue()
    endif()
    string(REPLACE ";" "@" entries_arg "${entries}")
    add_custom_command(
      OUTPUT ${dir}/artifacts.toml
      COMMAND ${CMAKE_COMMAND} -DENTRIES=${entries_arg} -DOUT=${dir}/artifacts.toml
              "-DFINGERPRINT=${DDO_BUILD_FINGERPRINT}" -DPLATFORM=linux-${CMAKE_SYSTEM_PROCESSOR}
              -P ${CMAKE_SOURCE_DIR}/cmake/write_manifest.cmake
      DEPENDS ${targets} ${CMAKE_SOURCE_DIR}/cmake/write_manifest.cmake
      COMMENT "ddo: writing ${dir}/artifacts.toml"
      VERBATIM)
    add_custom_target(ddo_manifest_${group} ALL DEPENDS ${dir}/artifacts.toml)
    if(group STREQUAL "main")
      get_property(paths GLOBAL PROPERTY DDO_GROUP_${group}_PATHS)
      string(REPLACE ";" "@" paths_arg "${paths}")
      ddo_add_runtime_targets("${paths}" "${paths_arg}" ${dir})
    endif()
  endforeach()
endfunction()

# ddo_runtime_<model> (one per main model plugin; tools/ddo demo builds the one it runs): ddo-host, its presets, the
# allocator plugins and that model plugin, then the manifest of the main plugins whose files exist
# (write_manifest.cmake EXISTING_ONLY). After a full build every file exists, so that manifest equals the full one;
# in a tree where only this target was built it lists what was built, each entry hashed from the file it names.
function(ddo_add_runtime_targets entries entries_arg dir)
  set(allocators)
  set(models)
  foreach(e IN LISTS entries)
    string(REPLACE "|" ";" parts "${e}")
    list(GET parts 0 name)
    list(GET parts 1 kind)
    if(kind STREQUAL "allocator")
      list(APPEND allocators ${name})
    else()
      list(APPEND models ${name})
    endif()
  endforeach()
  foreach(m IN LISTS models)
    add_custom_target(ddo_runtime_${m}
      COMMAND ${CMAKE_COMMAND} -DENTRIES=${entries_arg} -DOUT=${dir}/artifacts.toml -DEXISTING_ONLY=ON
              "-DFINGERPRINT=${DDO_BUILD_FINGERPRINT}" -DPLATFORM=linux-${CMAKE_SYSTEM_PROCESSOR}
              -P ${CMAKE_SOURCE_DIR}/cmake/write_manifest.cmake
      COMMENT "ddo: writing ${dir}/artifacts.toml (the main plugins built so far)"
      VERBATIM)
    add_dependencies(ddo_runtime_${m} ddo-host ddo_presets ${allocators} ${m})
  endforeach()
endfunction()
