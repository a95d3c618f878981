# Warnings for project code (never for generated protobuf code).
function(konn_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    # Exception: g++ 12 at -O2 reports every Asio C++20 coroutine frame as freed by a
    # "mismatched" operator delete (awaitable_frame_base's own new/delete pair); a known false
    # positive, so this one diagnostic stays off.
    -Wno-mismatched-new-delete)
  if(KONN_UNITY)
    # A unity batch (cmake/KonnUnity.cmake) #includes .cc files, and g++ takes every type they
    # define for a header's: a coroutine frame holding a value of an anonymous-namespace type
    # then reads as an ODR hazard that a real header would be. Not one here.
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
  if(KONN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
