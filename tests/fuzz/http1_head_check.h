#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/http/http1_parser.h"
#include "tests/fuzz/fuzz_input.h"

namespace konn::fuzz {

// Feeds `stream` to `parser` in pieces of `piece` bytes (as reads would deliver it), message
// after message, and checks what every caller relies on: `consumed` stays within the piece, body
// views point into the piece, a message with both Content-Length and chunked framing is never
// accepted (request smuggling), and a failed parser stays failed. `on_head` sees every head.
template <typename OnHead>
void feed_in_pieces(core::http::Http1Parser& parser, std::string_view stream, size_t piece,
                    OnHead on_head) {
  using Status = core::http::Http1Parser::Status;
  if (piece == 0) piece = 1;
  while (!stream.empty()) {
    std::string_view chunk = stream.substr(0, piece);
    auto r = parser.feed(chunk);
    KONN_FUZZ_CHECK(r.consumed <= chunk.size());
    for (auto body : r.body) {
      KONN_FUZZ_CHECK(body.data() >= chunk.data());
      KONN_FUZZ_CHECK(body.data() + body.size() <= chunk.data() + chunk.size());
    }
    if (r.head_complete) {
      KONN_FUZZ_CHECK(parser.head_ready());
      const auto& h = parser.head();
      KONN_FUZZ_CHECK(!(h.chunked && h.content_length.has_value()));
      on_head(h);
    }
    if (r.status == Status::Invalid) {
      KONN_FUZZ_CHECK(parser.error_status() == 400 || parser.error_status() == 431 ||
                      parser.error_status() == 501);
      KONN_FUZZ_CHECK(parser.feed("GET / HTTP/1.1\r\n\r\n").status == Status::Invalid);
      return;
    }
    if (r.status == Status::MessageComplete) {
      if (parser.head().upgrade) return;  // the rest is the new protocol's
      parser.reset();
    } else {
      KONN_FUZZ_CHECK(r.consumed == chunk.size());
    }
    if (r.consumed == 0 && r.status != Status::MessageComplete) return;
    stream.remove_prefix(r.consumed);
  }
  parser.finish();
}

}  // namespace konn::fuzz
