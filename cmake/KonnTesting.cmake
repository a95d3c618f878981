# konn_add_library(name SOURCES ... DEPS ...): one static library per folder (STYLE rule 1).
function(konn_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  konn_unity_sources(sources ${name} ${ARG_SOURCES})
  add_library(${name} STATIC ${sources})
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
  konn_unity_sources(sources ${name} ${ARG_SOURCES})
  add_executable(${name} ${sources})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE konn_test_main ${ARG_DEPS})
  konn_set_warnings(${name})
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  # Built binaries and the source tree are found through KONN_BIN_DIR / KONN_SOURCE_DIR when set,
  # else through defaults compiled into tests/support (a list-valued ENVIRONMENT would be split
  # by catch_discover_tests, so only one variable is passed here).
  if("unit" IN_LIST labels OR "integration" IN_LIST labels)
    add_dependencies(konn_tsan_set ${name})
  endif()
  # --warn NoTests: a test whose name does not match itself (a ';' in it splits the CMake list
  # and cuts the name) fails instead of passing with nothing run.
  catch_discover_tests(${name} EXTRA_ARGS --warn NoTests PROPERTIES LABELS "${labels}" TIMEOUT 300
    ENVIRONMENT "KONN_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()

# konn_add_executable(name SOURCES ... DEPS ...): a daemon's thin main, or a test or bench
# helper. Installs nothing: what is installed and packaged is listed in KonnPackaging.cmake.
function(konn_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  konn_unity_sources(sources ${name} ${ARG_SOURCES})
  add_executable(${name} ${sources})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  konn_set_warnings(${name})
  if(NOT CMAKE_CURRENT_SOURCE_DIR MATCHES "^${PROJECT_SOURCE_DIR}/bench")
    add_dependencies(konn_tsan_set ${name})
  endif()
endfunction()

# konn_add_fuzzer(name SOURCES ... DEPS ...): a libFuzzer target under the `fuzz` preset
# (KONN_FUZZ, clang; built by the konn_fuzzers target into build/fuzz/fuzz/). Everywhere else the
# same source links tests/fuzz/replay_main.cc and becomes the ctest `fuzz.<name>`, which runs every
# input of tests/fuzz/corpus/<name>/ once: each test pass (plain, ASan+UBSan) replays the corpora.
function(konn_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${name})
  if(KONN_FUZZ)
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE ${ARG_DEPS})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/fuzz)
    add_dependencies(konn_fuzzers ${name})
  elseif(KONN_BUILD_TESTS)
    # replay_main.cc tests whether the target defines LLVMFuzzerInitialize (a weak symbol), which
    # it cannot ask in the same translation unit: it stays out of the unity batch.
    konn_unity_sources(sources ${name} ${ARG_SOURCES})
    add_executable(${name} ${sources} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cc)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PRIVATE ${ARG_DEPS})
    konn_set_warnings(${name})
    add_test(NAME fuzz.${name} COMMAND ${name} ${corpus})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
  endif()
endfunction()
