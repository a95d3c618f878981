#pragma once

#include <string>

namespace konn::core::h2 {

// gRPC's status codes, numbered as gRPC numbers them: the value of the grpc-status trailer.
// Unscoped, so a code compares with the number a peer sent (any number may come; the names
// cover the ones gRPC defines).
namespace grpc_code {
enum Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};
}  // namespace grpc_code

// The status of one gRPC call: what a server sends in its trailers (grpc-status, grpc-message)
// and what a client's call ends with. The only status type of the data path: core/h2's calls,
// core/tunnel's PacketStream and the daemons' streams all speak it. A default GrpcStatus is OK.
struct GrpcStatus {
  int code = grpc_code::kOk;  // a grpc_code::Code, or whatever number a peer sent
  std::string message;        // grpc-message (sent percent-encoded; empty: not sent)
  bool ok() const { return code == grpc_code::kOk; }
};

}  // namespace konn::core::h2
