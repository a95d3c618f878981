#include "core/http/http1_writer.h"

#include <catch2/catch.hpp>

using namespace konn::core::http;

TEST_CASE("heads are written in HTTP/1.1 form", "[http]") {
  CHECK(write_request_head("GET", "/api", {{"Host", "a:1"}}) ==
        "GET /api HTTP/1.1\r\nHost: a:1\r\n\r\n");
  CHECK(write_response_head(403, "", {}) == "HTTP/1.1 403 Forbidden\r\n\r\n");
  CHECK(write_response_head(200, "Connection established", {}) ==
        "HTTP/1.1 200 Connection established\r\n\r\n");
  std::string r = write_text_response(403, "Forbidden\n", false);
  CHECK(r.find("HTTP/1.1 403 Forbidden\r\n") == 0);
  CHECK(r.find("Content-Length: 10\r\n") != std::string::npos);
  CHECK(r.substr(r.size() - 14) == "\r\n\r\nForbidden\n");
}

TEST_CASE("written heads parse back", "[http]") {
  std::string text = write_request_head("POST", "/x", {{"Content-Length", "2"}, {"A", "b"}}) + "hi";
  Http1Parser p(Http1Parser::Kind::Request);
  auto r = p.feed(text);
  REQUIRE(r.status == Http1Parser::Status::MessageComplete);
  CHECK(p.head().method == "POST");
  REQUIRE(r.body.size() == 1);
  CHECK(r.body[0] == "hi");
}

TEST_CASE("chunk framing and hop-by-hop headers", "[http]") {
  CHECK(chunk_header(0x1a2b) == "1a2b\r\n");
  CHECK(chunk_header(0) == "0\r\n");
  MessageHead h;
  h.headers = {{"Connection", "X-Foo"}};
  CHECK(is_hop_by_hop(h, "x-foo"));
  CHECK(is_hop_by_hop(h, "transfer-encoding"));
  CHECK_FALSE(is_hop_by_hop(h, "Authorization"));
}
