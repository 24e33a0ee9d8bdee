# How each dependency is found: ../shared/deps-notes.md and docs/decisions.md.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)                      # SHA-256 (EVP) for artifact trust
find_package(spdlog REQUIRED)                        # host-owned logging
find_package(nlohmann_json 3.10 REQUIRED)            # reports, fixtures
find_package(CLI11 CONFIG REQUIRED)                  # ddo-host command line
find_package(Boost 1.74 REQUIRED)                    # Boost.DLL (header-only)
find_package(PNG REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)     # BPE pre-tokenizer regex (\p{L}, look-ahead)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc) # NFC normalisation of prompts
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece) # Gemma's tokenizer.model (LTX-2)
# FFmpeg 5.1 (Debian 12) for video/audio outputs (core/media): muxing, H.264 (libx264) + AAC encoding, colour
# conversion, sample-format conversion. One imported target per library. DDO_WITH_MEDIA=OFF builds without
# libddo_media (a machine without FFmpeg's libraries: Debian's runtime closure is ~160 MiB).
option(DDO_WITH_MEDIA "ddo: build libddo_media (MP4/WAV outputs through FFmpeg's libraries)" ON)
if(DDO_WITH_MEDIA)
  pkg_check_modules(LIBAVFORMAT REQUIRED IMPORTED_TARGET libavformat>=59)
  pkg_check_modules(LIBAVCODEC REQUIRED IMPORTED_TARGET libavcodec>=59)
  pkg_check_modules(LIBAVUTIL REQUIRED IMPORTED_TARGET libavutil>=57)
  pkg_check_modules(LIBSWSCALE REQUIRED IMPORTED_TARGET libswscale>=6)
  pkg_check_modules(LIBSWRESAMPLE REQUIRED IMPORTED_TARGET libswresample>=4)
endif()
find_library(XXHASH_LIBRARY NAMES xxhash REQUIRED)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(ddo_xxhash INTERFACE)
target_link_libraries(ddo_xxhash INTERFACE ${XXHASH_LIBRARY})
target_include_directories(ddo_xxhash INTERFACE ${XXHASH_INCLUDE_DIR})

# CUDA Toolkit: headers for compile checks of the CUDA paths; the driver is resolved at run time.
set(CUDAToolkit_ROOT /usr/local/cuda CACHE PATH "ddo: CUDA toolkit root")
find_package(CUDAToolkit QUIET)

# LibTorch from the venv's PyPI torch wheel (tools/ddo passes Torch_DIR).
set(DDO_TORCH_VERSION "none")
set(DDO_CUDA_VERSION "none")
if(CUDAToolkit_FOUND)
  set(DDO_CUDA_VERSION "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
endif()
if(DDO_WITH_TORCH)
  # Torch's CMake otherwise try_run()s a GPU-architecture probe, which fails without a GPU (and with
  # CMAKE_CXX_STANDARD 20 on CMake 3.25). We compile no .cu against torch; the list is only recorded.
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;8.6;8.9;9.0")
  endif()
  find_package(Torch REQUIRED)
  set(DDO_TORCH_VERSION "${Torch_VERSION}")   # from TorchConfigVersion.cmake, e.g. 2.15.0
  # Targets that include torch headers link this; keeps TORCH_CXX_FLAGS (ABI flag) consistent.
  add_library(ddo_torch_deps INTERFACE)
  target_link_libraries(ddo_torch_deps INTERFACE ${TORCH_LIBRARIES})
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(ddo_torch_deps INTERFACE ${_torch_flags})
  # The wheel's CUDA libraries (nvidia/*/lib, CUDA 13.2) must win over /usr/local/cuda (13.0) both
  # when linking (rpath-link) and at run time (libtorch_cuda's own RPATH): --as-needed drops the
  # direct libcudart/libnvrtc from /usr/local/cuda that Torch's CMake adds. docs/decisions.md.
  get_filename_component(_torch_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  file(GLOB _nv_dirs LIST_DIRECTORIES true "${_torch_site}/nvidia/*/lib")
  foreach(d IN LISTS _nv_dirs)
    target_link_options(ddo_torch_deps INTERFACE "-Wl,-rpath-link,${d}")
  endforeach()
  target_link_options(ddo_torch_deps INTERFACE -Wl,--as-needed)
endif()
message(STATUS "ddo: torch ${DDO_TORCH_VERSION}, CUDA toolkit ${DDO_CUDA_VERSION}")
