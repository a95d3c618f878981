#include "core/konnectivity/connect_reply.h"

#include <catch2/catch.hpp>

using namespace konn::core::konnectivity;
using Status = ConnectReply::Status;

TEST_CASE("konnectivity: CONNECT request head", "[konnectivity]") {
  auto r = connect_request("10.0.0.1:443");
  CHECK(r.rfind("CONNECT 10.0.0.1:443 HTTP/1.1\r\n", 0) == 0);
  CHECK(r.find("\r\nHost: 10.0.0.1:443\r\n") != std::string::npos);
  CHECK(r.size() >= 4);
  CHECK(r.substr(r.size() - 4) == "\r\n\r\n");
}

TEST_CASE("konnectivity: 200 opens the tunnel and keeps the bytes after the head",
          "[konnectivity]") {
  std::string reply = "HTTP/1.1 200 Connection Established\r\n\r\nSSH-2.0-banner";
  // Byte by byte: a head split anywhere.
  ConnectReply r;
  Status st = Status::NeedMore;
  size_t i = 0;
  for (; i < reply.size() && st == Status::NeedMore; ++i) st = r.feed(reply.substr(i, 1));
  REQUIRE(st == Status::Established);
  CHECK(r.status() == 200);
  // What followed the head in the last piece fed, plus what was never fed.
  CHECK(r.leftover() + reply.substr(i) == "SSH-2.0-banner");

  ConnectReply whole;
  REQUIRE(whole.feed(reply) == Status::Established);
  CHECK(whole.leftover() == "SSH-2.0-banner");
}

TEST_CASE("konnectivity: only exactly 200 is success", "[konnectivity]") {
  ConnectReply r;
  CHECK(r.feed("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n") == Status::Failed);
  CHECK(r.status() == 204);
}

TEST_CASE("konnectivity: a refusal carries the status and the body", "[konnectivity]") {
  std::string head =
      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
      "Connection: close\r\n\r\n";
  std::string body = "dial tcp 127.0.0.1:1: connect: connection refused";
  body = body.substr(0, 48);
  ConnectReply r;
  CHECK(r.feed(head) == Status::NeedMore);
  CHECK(r.feed(body.substr(0, 10)) == Status::NeedMore);
  CHECK(r.feed(body.substr(10)) == Status::Failed);
  CHECK(r.status() == 502);
  CHECK(r.body() == body);
  CHECK(r.describe() == "502 Bad Gateway: " + body);

  // Without Content-Length the body ends at EOF.
  ConnectReply eof;
  CHECK(eof.feed("HTTP/1.1 500 Internal Server Error\r\n\r\nNo agent available\n") ==
        Status::NeedMore);
  CHECK(eof.finish() == Status::Failed);
  CHECK(eof.describe() == "500 Internal Server Error: No agent available");
}

TEST_CASE("konnectivity: garbage and early EOF are invalid", "[konnectivity]") {
  ConnectReply g;
  CHECK(g.feed("SSH-2.0-OpenSSH\r\n\r\n") == Status::Invalid);
  CHECK(!g.error().empty());
  ConnectReply e;
  CHECK(e.feed("HTTP/1.1 200 Conn") == Status::NeedMore);
  CHECK(e.finish() == Status::Invalid);
}
