#include "core/h2/grpc_status.h"

#include <catch2/catch.hpp>
#include <grpcpp/support/status.h>

namespace {

// The number gRPC C++ (the reference implementation) gives `code`.
int grpc_cpp_number(grpc::StatusCode code) { return static_cast<int>(code); }

}  // namespace

TEST_CASE("grpc_code numbers every code as gRPC does", "[h2][unit]") {
  namespace grpc_code = konn::core::h2::grpc_code;
  CHECK(grpc_code::kOk == grpc_cpp_number(grpc::StatusCode::OK));
  CHECK(grpc_code::kCancelled == grpc_cpp_number(grpc::StatusCode::CANCELLED));
  CHECK(grpc_code::kUnknown == grpc_cpp_number(grpc::StatusCode::UNKNOWN));
  CHECK(grpc_code::kInvalidArgument == grpc_cpp_number(grpc::StatusCode::INVALID_ARGUMENT));
  CHECK(grpc_code::kDeadlineExceeded == grpc_cpp_number(grpc::StatusCode::DEADLINE_EXCEEDED));
  CHECK(grpc_code::kNotFound == grpc_cpp_number(grpc::StatusCode::NOT_FOUND));
  CHECK(grpc_code::kAlreadyExists == grpc_cpp_number(grpc::StatusCode::ALREADY_EXISTS));
  CHECK(grpc_code::kPermissionDenied == grpc_cpp_number(grpc::StatusCode::PERMISSION_DENIED));
  CHECK(grpc_code::kResourceExhausted == grpc_cpp_number(grpc::StatusCode::RESOURCE_EXHAUSTED));
  CHECK(grpc_code::kFailedPrecondition == grpc_cpp_number(grpc::StatusCode::FAILED_PRECONDITION));
  CHECK(grpc_code::kAborted == grpc_cpp_number(grpc::StatusCode::ABORTED));
  CHECK(grpc_code::kOutOfRange == grpc_cpp_number(grpc::StatusCode::OUT_OF_RANGE));
  CHECK(grpc_code::kUnimplemented == grpc_cpp_number(grpc::StatusCode::UNIMPLEMENTED));
  CHECK(grpc_code::kInternal == grpc_cpp_number(grpc::StatusCode::INTERNAL));
  CHECK(grpc_code::kUnavailable == grpc_cpp_number(grpc::StatusCode::UNAVAILABLE));
  CHECK(grpc_code::kDataLoss == grpc_cpp_number(grpc::StatusCode::DATA_LOSS));
  CHECK(grpc_code::kUnauthenticated == grpc_cpp_number(grpc::StatusCode::UNAUTHENTICATED));
}

TEST_CASE("a GrpcStatus is ok exactly when its code is OK, message or not", "[h2][unit]") {
  using konn::core::h2::GrpcStatus;
  namespace grpc_code = konn::core::h2::grpc_code;
  GrpcStatus none;
  CHECK(none.ok());
  CHECK(none.code == grpc_code::kOk);
  CHECK(none.message.empty());
  CHECK(GrpcStatus{grpc_code::kOk, "done"}.ok());
  CHECK_FALSE(GrpcStatus{grpc_code::kCancelled, ""}.ok());
  // A peer may send a number gRPC does not name: kept as it came, and not OK.
  GrpcStatus odd{42, "from a peer"};
  CHECK_FALSE(odd.ok());
  CHECK(odd.code == 42);
}
