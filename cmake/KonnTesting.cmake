# konn_add_library(name SOURCES ... DEPS ...): one static library per folder (STYLE rule 1).
function(konn_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  konn_set_warnings(${name})
endfunction()

# konn_add_unit_tests(name SOURCES ... DEPS ...): one Catch2 binary per library, each test case
# registered with ctest.
function(konn_add_unit_tests name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT KONN_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE konn_test_main ${ARG_DEPS})
  konn_set_warnings(${name})
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  # Built binaries and the source tree are found through KONN_BIN_DIR / KONN_SOURCE_DIR when set,
  # else through defaults compiled into tests/support (a list-valued ENVIRONMENT would be split
  # by catch_discover_tests, so only one variable is passed here).
  catch_discover_tests(${name} PROPERTIES LABELS "${labels}" TIMEOUT 300
    ENVIRONMENT "KONN_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()

# konn_add_executable(name SOURCES ... DEPS ...): a daemon's thin main, or a test or bench
# helper. Installs nothing: what is installed and packaged is listed in KonnPackaging.cmake.
function(konn_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  konn_set_warnings(${name})
endfunction()
