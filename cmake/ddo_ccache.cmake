# ccache, when installed (tools/ddo setup installs Debian's `ccache`): every compile goes through it, with its cache
# outside the clone (ccache's default, ~/.cache/ccache, at most 20 GiB: tools/ddo setup). CCACHE_BASEDIR = the source tree and CCACHE_NOHASHDIR make
# the hashes independent of where the clone is, so a fresh clone in another folder (CI) hits the objects a previous
# clone compiled (docs/validation.md, "Build cache"). -DDDO_CCACHE=OFF, or CCACHE_DISABLE=1 at build time, turns it off.
option(DDO_CCACHE "ddo: compile through ccache when it is installed" ON)
if(DDO_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(DDO_CCACHE_PROGRAM ccache)
  if(DDO_CCACHE_PROGRAM)
    # The cache's size limit is ccache's own setting (tools/ddo setup raises it to 20 GiB: see there).
    set(_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=true
        CCACHE_SLOPPINESS=pch_defines,time_macros ${DDO_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
    message(STATUS "ddo: compiling through ${DDO_CCACHE_PROGRAM} (base dir ${CMAKE_SOURCE_DIR})")
  endif()
endif()
