# ddo_add_model_plugin(<name> SOURCES ... [LIBS ...] [OUTPUT_DIRECTORY dir])
#
# Installed with ddo (lib/cmake/ddo); builds a model plugin out of tree against an installed ddo: a MODULE
# libddo_model_<name>.so with hidden visibility, a version script exporting only ddo_plugin_negotiate and
# ddo_plugin_get_vtable, -z defs, C++20, linked to ddo::model (the model kit), and no RPATH (ddo-host resolves the
# plugin's libddo_* and LibTorch dependencies: Note [Plugin dependencies]). The plugin's fingerprint is
# DDO_BUILD_FINGERPRINT from the installed ddo/build_info.h, so the compiler must be the one ddo was built with.
# The manifest entry is not written here: `ddo-host manifest add <file> --dir <plugin dir>` writes it for review.
set(_DDO_MODEL_PLUGIN_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(ddo_add_model_plugin name)
  cmake_parse_arguments(P "" "OUTPUT_DIRECTORY" "SOURCES;LIBS" ${ARGN})
  if(NOT P_SOURCES)
    message(FATAL_ERROR "ddo_add_model_plugin(${name}): SOURCES is required")
  endif()
  set(_cc "${CMAKE_CXX_COMPILER_ID}-${CMAKE_CXX_COMPILER_VERSION}")
  if(DDO_COMPILER AND NOT _cc STREQUAL DDO_COMPILER)
    message(FATAL_ERROR "ddo_add_model_plugin(${name}): ddo was built with ${DDO_COMPILER}, this project uses ${_cc}; "
                        "ddo-host refuses a plugin whose fingerprint differs. Configure with the same compiler "
                        "(-DCMAKE_CXX_COMPILER=...).")
  endif()
  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "ddo_model_${name}"
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    SKIP_BUILD_RPATH ON INSTALL_RPATH "")
  if(P_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${P_OUTPUT_DIRECTORY}")
  endif()
  target_link_options(${name} PRIVATE "-Wl,--version-script=${_DDO_MODEL_PLUGIN_DIR}/plugin_exports.map" -Wl,-z,defs)
  target_link_libraries(${name} PRIVATE ddo::model ${P_LIBS})
endfunction()
