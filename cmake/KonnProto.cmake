# Debian bookworm ships no Protobuf CMake config, only FindProtobuf's module mode; gRPC's config
# then provides gRPC::grpc++ and gRPC::grpc_cpp_plugin.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)

# konn_proto_library(target PROTO_ROOT dir PROTOS a.proto b.proto): generates message and gRPC
# service code with protoc + grpc_cpp_plugin into the build tree. `target` holds the messages
# (protobuf-lite only: what the daemons link); `target`_grpc adds the gRPC C++ service stubs, for
# tests and tools that use gRPC C++ as a reference peer (no daemon links it: ARCHITECTURE,
# invariants).
function(konn_proto_library target)
  cmake_parse_arguments(ARG "" "PROTO_ROOT" "PROTOS" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${out})
  set(srcs)
  set(grpc_srcs)
  foreach(proto ${ARG_PROTOS})
    get_filename_component(dir ${proto} DIRECTORY)
    get_filename_component(stem ${proto} NAME_WE)
    set(base ${out}/${dir}/${stem})
    set(gen ${base}.pb.cc ${base}.pb.h ${base}.grpc.pb.cc ${base}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${gen}
      COMMAND protobuf::protoc
        --proto_path=${ARG_PROTO_ROOT}
        --cpp_out=${out}
        --grpc_out=${out}
        --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
        ${ARG_PROTO_ROOT}/${proto}
      DEPENDS ${ARG_PROTO_ROOT}/${proto} gRPC::grpc_cpp_plugin
      COMMENT "protoc ${proto}")
    list(APPEND srcs ${base}.pb.cc)
    list(APPEND grpc_srcs ${base}.grpc.pb.cc)
  endforeach()
  add_library(${target} STATIC ${srcs})
  target_include_directories(${target} SYSTEM PUBLIC ${out})
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf-lite)
  add_library(${target}_grpc STATIC ${grpc_srcs})
  target_link_libraries(${target}_grpc PUBLIC ${target} gRPC::grpc++)
endfunction()
