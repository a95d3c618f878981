// gRPC length-prefixed messages as they arrive in HTTP/2 DATA frames (core/h2). Input:
// [piece size][limit selector][the stream's bytes...]. The same bytes are decoded once in pieces
// and once whole: both give the same messages and the same verdict.

#include <string>
#include <vector>

#include "core/h2/grpc_framing.h"
#include "tests/fuzz/fuzz_input.h"

using konn::core::h2::GrpcMessageDecoder;
using Status = GrpcMessageDecoder::Status;

namespace {

struct Outcome {
  std::vector<std::string> messages;
  bool invalid = false;
  int grpc_status = 0;
  bool in_message = false;
};

Outcome run(std::string_view bytes, size_t piece, size_t limit) {
  GrpcMessageDecoder d(limit);
  Outcome out;
  while (!bytes.empty() && !out.invalid) {
    std::string_view chunk = bytes.substr(0, piece);
    bytes.remove_prefix(chunk.size());
    while (true) {
      auto r = d.decode(chunk);
      KONN_FUZZ_CHECK(r.consumed <= chunk.size());
      chunk.remove_prefix(r.consumed);
      if (r.status == Status::Invalid) {
        KONN_FUZZ_CHECK(d.failed() && !d.error().empty());
        KONN_FUZZ_CHECK(d.grpc_status() == 8 || d.grpc_status() == 13);
        // A failed decoder stays failed.
        KONN_FUZZ_CHECK(d.decode("\0\0\0\0\0").status == Status::Invalid);
        out.invalid = true;
        out.grpc_status = d.grpc_status();
        break;
      }
      if (r.status == Status::NeedMore) {
        KONN_FUZZ_CHECK(chunk.empty());
        break;
      }
      std::string m = d.take_message();
      KONN_FUZZ_CHECK(m.size() <= limit);
      out.messages.push_back(std::move(m));
      if (chunk.empty()) break;
    }
  }
  out.in_message = d.in_message();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::FuzzInput in(data, size);
  const size_t piece = 1 + in.byte();
  static constexpr size_t kLimits[] = {0, 1, 16, 300, konn::core::h2::kMaxMessageBytes};
  const size_t limit = kLimits[in.pick(5)];
  const std::string_view bytes = in.rest();
  Outcome pieces = run(bytes, piece, limit);
  Outcome whole = run(bytes, bytes.size() + 1, limit);
  KONN_FUZZ_CHECK(pieces.messages == whole.messages);
  KONN_FUZZ_CHECK(pieces.invalid == whole.invalid);
  KONN_FUZZ_CHECK(pieces.grpc_status == whole.grpc_status);
  KONN_FUZZ_CHECK(pieces.in_message == whole.in_message);
  return 0;
}
