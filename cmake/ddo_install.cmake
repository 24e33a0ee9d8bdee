# `cmake --install` lays out a relocatable tree (docs/architecture.md, "Writing a model plugin"):
#   bin/ddo-host                      the host (DT_RPATH $ORIGIN/../lib + LibTorch: Note [Plugin dependencies])
#   lib/libddo_{core,torch,model}.so  the core libraries (RPATH $ORIGIN + LibTorch)
#   lib/libddo_media.so               the MP4/WAV writers the video plugins link (when DDO_WITH_MEDIA)
#   lib/ddo/plugins/                  the built plugins + their artifacts.toml (plugins carry no RPATH, so the
#                                     installed bytes are the built bytes and the build's manifest holds)
#   include/ddo/                      the C ABI, the C++ core API, the model kit, build_info.h (fingerprint)
#   share/ddo/presets/                the shipped presets (found relative to bin/ddo-host)
#   lib/cmake/ddo/                    find_package(ddo): ddo::core, ddo::torch, ddo::model, ddo_add_model_plugin()
# The build tree has the same bin/, lib/, lib/ddo/plugins/ and share/ddo/presets/ layout.
include(CMakePackageConfigHelpers)

install(TARGETS ddo-host RUNTIME DESTINATION ${DDO_INSTALL_BINDIR})
if(TARGET ddo-vmm-probe)
  install(TARGETS ddo-vmm-probe RUNTIME DESTINATION ${DDO_INSTALL_BINDIR})
endif()

set(_ddo_exported ddo_core)
if(TARGET ddo_model)
  list(APPEND _ddo_exported ddo_torch_deps ddo_torch ddo_model)
endif()
set_target_properties(ddo_core PROPERTIES EXPORT_NAME core)
if(TARGET ddo_model)
  set_target_properties(ddo_torch_deps PROPERTIES EXPORT_NAME torch_deps)
  set_target_properties(ddo_torch PROPERTIES EXPORT_NAME torch)
  set_target_properties(ddo_model PROPERTIES EXPORT_NAME model)
endif()
# libddo_media is exported with the model kit: ddo_model links it and model_run.hpp names media::DecodedImage
# (condition images, Note [Image input]); its headers name no FFmpeg type.
if(TARGET ddo_media)
  list(APPEND _ddo_exported ddo_media)
  set_target_properties(ddo_media PROPERTIES EXPORT_NAME media)
endif()
install(TARGETS ${_ddo_exported} EXPORT ddoTargets
  LIBRARY DESTINATION ${DDO_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${DDO_INSTALL_INCLUDEDIR})
install(EXPORT ddoTargets NAMESPACE ddo:: DESTINATION ${DDO_INSTALL_CMAKEDIR})
# model_run.hpp includes the media headers (condition images) with or without libddo_media.
if(TARGET ddo_model OR TARGET ddo_media)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/media/include/ddo DESTINATION ${DDO_INSTALL_INCLUDEDIR})
endif()

install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/include/ddo DESTINATION ${DDO_INSTALL_INCLUDEDIR})
if(TARGET ddo_model)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/torch/include/ddo ${CMAKE_SOURCE_DIR}/core/model/include/ddo
          DESTINATION ${DDO_INSTALL_INCLUDEDIR})
endif()
install(FILES ${CMAKE_BINARY_DIR}/generated/ddo/build_info.h DESTINATION ${DDO_INSTALL_INCLUDEDIR}/ddo)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/presets/ DESTINATION ${DDO_INSTALL_PRESETDIR} FILES_MATCHING PATTERN "*.toml")

# The plugins of the main group and their manifest, exactly as built.
get_property(_ddo_main_plugins GLOBAL PROPERTY DDO_GROUP_main_TARGETS)
if(_ddo_main_plugins)
  install(TARGETS ${_ddo_main_plugins} LIBRARY DESTINATION ${DDO_INSTALL_PLUGINDIR})
  install(FILES ${DDO_PLUGIN_OUTPUT_DIR}/artifacts.toml DESTINATION ${DDO_INSTALL_PLUGINDIR})
endif()

# find_package(ddo)
set(DDO_PACKAGE_TORCH_DIR "${Torch_DIR}")
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ddoConfig.cmake.in ${CMAKE_BINARY_DIR}/cmake/ddoConfig.cmake
  INSTALL_DESTINATION ${DDO_INSTALL_CMAKEDIR}
  PATH_VARS DDO_INSTALL_INCLUDEDIR DDO_INSTALL_PLUGINDIR DDO_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/ddoConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ExactVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/ddoConfig.cmake ${CMAKE_BINARY_DIR}/cmake/ddoConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/ddo_model_plugin.cmake ${CMAKE_SOURCE_DIR}/cmake/plugin_exports.map
        DESTINATION ${DDO_INSTALL_CMAKEDIR})
