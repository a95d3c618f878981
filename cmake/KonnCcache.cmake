# ccache (installed by scripts/setup.sh) for every compile, set up so that a second clone of konn
# in another folder hits the cache the first one filled:
#  - CCACHE_BASEDIR: paths under the clone (sources, the build tree under build/) are hashed
#    relative to it;
#  - CCACHE_NOHASHDIR: the working directory is left out of the hash even though objects carry
#    debug information (their DW_AT_comp_dir then names the clone that filled the cache).
# The settings travel on the compile command line, so the user's own ccache configuration is not
# touched. A plain `-DCMAKE_CXX_COMPILER_LAUNCHER=ccache` gets the same settings; any other
# launcher given on the cmake command line is kept as it is; KONN_CCACHE=OFF turns this off.
option(KONN_CCACHE "Compile through ccache when it is installed" ON)
if(KONN_CCACHE AND (NOT CMAKE_CXX_COMPILER_LAUNCHER OR CMAKE_CXX_COMPILER_LAUNCHER MATCHES "^(.*/)?ccache$"))
  find_program(KONN_CCACHE_PROGRAM ccache)
  if(KONN_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
      env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${KONN_CCACHE_PROGRAM})
  endif()
endif()
