#include "tests/support/http_get.h"

#include <string_view>
#include <system_error>

#include <asio.hpp>

#include "core/http/http1_parser.h"

namespace konn::testsupport {

HttpAnswer http_get_local(uint16_t port, const std::string& path) {
  using konn::core::http::Http1Parser;
  HttpAnswer out;
  try {
    asio::io_context ctx;
    asio::ip::tcp::socket s(ctx);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    asio::write(s, asio::buffer(req));
    Http1Parser parser(Http1Parser::Kind::Response);
    std::string body;
    std::error_code ec;
    char buf[16384];
    bool complete = false;
    bool invalid = false;
    // Read until the daemon closes (Connection: close), not only to the response's end: callers
    // count the daemon's descriptors right after a scrape, and this connection must be gone.
    for (;;) {
      size_t n = s.read_some(asio::buffer(buf), ec);
      if (ec) break;
      if (complete || invalid) continue;
      auto r = parser.feed(std::string_view(buf, n));
      for (auto piece : r.body) body.append(piece);
      invalid = r.status == Http1Parser::Status::Invalid;
      complete = r.status == Http1Parser::Status::MessageComplete;
    }
    if (!complete && !invalid) complete = parser.finish();
    if (!complete) return out;
    out.status = parser.head().status;
    out.body = std::move(body);
  } catch (const std::exception&) {
    out.status = 0;
  }
  return out;
}

}  // namespace konn::testsupport
