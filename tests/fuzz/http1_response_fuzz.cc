// HTTP/1.1 response heads and bodies from upstreams: the apiserver's answers relayed by
// kubeproxy-http (chunked watch streams, 101 upgrades), CONNECT replies read by the konnectivity
// client and the test client. Input: [piece size][flags][the byte stream...].

#include "core/http/http1_parser.h"
#include "tests/fuzz/http1_head_check.h"

using konn::core::http::Http1Parser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::FuzzInput in(data, size);
  size_t piece = 1 + in.byte() * 8;
  bool head_request = in.flag();
  Http1Parser parser(Http1Parser::Kind::Response, 64 * 1024);
  parser.expect_no_body(head_request);
  konn::fuzz::feed_in_pieces(parser, in.rest(), piece, [](const auto& head) {
    KONN_FUZZ_CHECK(head.status >= 100 && head.status <= 999);
  });
  return 0;
}
