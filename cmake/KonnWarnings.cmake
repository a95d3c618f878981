# Warnings for project code (never for generated protobuf code).
function(konn_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast)
  if(KONN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
