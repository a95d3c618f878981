# KONN_SANITIZE applies to everything built in this tree, so instrumented code never links an
# uninstrumented copy of our own libraries.
if(KONN_SANITIZE)
  add_compile_options(-fsanitize=${KONN_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KONN_SANITIZE})
  if(KONN_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()

# The `fuzz` preset (clang-14, libFuzzer): every object gets libFuzzer's coverage hooks; the fuzz
# targets link -fsanitize=fuzzer (konn_add_fuzzer). Two clang-14 workarounds:
#  - Asio 1.22 enables co_await under clang only with libc++'s <experimental/coroutine>; with
#    libstdc++ 12 (Debian's) the standard <coroutine> works once Asio is told so.
#  - -fsanitize=function on coroutine frames makes clang-14 fail with "Cannot represent a
#    difference across sections"; the rest of UBSan stays on.
option(KONN_FUZZ "Build the libFuzzer targets (clang only)" OFF)
if(KONN_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link -fno-sanitize=function)
  add_compile_definitions(ASIO_HAS_CO_AWAIT=1 ASIO_HAS_STD_COROUTINE=1)
  add_custom_target(konn_fuzzers)
endif()
