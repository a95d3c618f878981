#include "test-client/http_response_parser.h"

#include <catch2/catch.hpp>

using konn::testclient::HttpResponseParser;
using Status = HttpResponseParser::Status;

namespace {

// Feeds `wire` one byte at a time: a parser that assumed whole reads would fail here.
Status feed_bytewise(HttpResponseParser& p, const std::string& wire) {
  for (char c : wire) p.feed(std::string_view(&c, 1));
  return p.status();
}

}  // namespace

TEST_CASE("http parser: Content-Length body in any split", "[testclient]") {
  std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nhelloEXTRA";
  HttpResponseParser whole;
  CHECK(whole.feed(wire) == Status::Complete);
  HttpResponseParser bytewise;
  CHECK(feed_bytewise(bytewise, wire) == Status::Complete);
  for (auto* p : {&whole, &bytewise}) {
    CHECK(p->code() == 200);
    CHECK(p->reason() == "OK");
    CHECK(p->body() == "hello");
    CHECK(p->header("x-a") == "b");
    CHECK(p->header("content-length") == "5");
  }
}

TEST_CASE("http parser: chunked with extensions and trailers", "[testclient]") {
  std::string wire =
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n";
  HttpResponseParser p;
  CHECK(feed_bytewise(p, wire) == Status::Complete);
  CHECK(p.code() == 404);
  CHECK(p.body() == "abc0123456789");
}

TEST_CASE("http parser: body until the connection ends", "[testclient]") {
  HttpResponseParser p;
  CHECK(p.feed("HTTP/1.0 200 OK\r\n\r\npart one ") == Status::NeedMore);
  CHECK(p.feed("part two") == Status::NeedMore);
  CHECK(p.finish() == Status::Complete);
  CHECK(p.body() == "part one part two");
}

TEST_CASE("http parser: interim 100 skipped and 204 has no body", "[testclient]") {
  HttpResponseParser p;
  CHECK(p.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n") == Status::Complete);
  CHECK(p.code() == 204);
  CHECK(p.body().empty());
}

TEST_CASE("http parser: invalid input is reported", "[testclient]") {
  HttpResponseParser a;
  CHECK(a.feed("SSH-2.0-OpenSSH\r\n\r\n") == Status::Invalid);
  CHECK(a.error().find("status line") != std::string::npos);

  HttpResponseParser b;
  CHECK(b.feed("HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n") == Status::Invalid);

  HttpResponseParser c;
  CHECK(c.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") == Status::Invalid);

  HttpResponseParser d;
  CHECK(d.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort") == Status::NeedMore);
  CHECK(d.finish() == Status::Invalid);
  CHECK(d.error().find("inside the response body") != std::string::npos);

  HttpResponseParser e;
  CHECK(e.feed(std::string(70 * 1024, 'a')) == Status::Invalid);
}
