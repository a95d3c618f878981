# KONN_SANITIZE applies to everything built in this tree, so instrumented code never links an
# uninstrumented copy of our own libraries.
if(KONN_SANITIZE)
  add_compile_options(-fsanitize=${KONN_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KONN_SANITIZE})
  if(KONN_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()
