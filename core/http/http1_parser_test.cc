#include "core/http/http1_parser.h"

#include <string>

#include <catch2/catch.hpp>

using konn::core::http::Http1Parser;
using Status = Http1Parser::Status;

namespace {

// Feeds `text` in pieces of `step` bytes, collecting body bytes, until the message completes or
// fails. Returns the final status; `rest` gets the bytes after the message.
Status feed_all(Http1Parser& p, const std::string& text, size_t step, std::string& body,
                std::string* rest = nullptr) {
  size_t pos = 0;
  std::string pending;
  while (pos < text.size() || !pending.empty()) {
    size_t take = std::min(step, text.size() - pos);
    pending.append(text, pos, take);
    pos += take;
    auto r = p.feed(pending);
    for (auto piece : r.body) body.append(piece);
    if (r.status != Status::NeedMore) {
      if (rest) *rest = pending.substr(r.consumed) + text.substr(pos);
      return r.status;
    }
    pending.erase(0, r.consumed);
    if (pos >= text.size() && !pending.empty()) break;
  }
  return Status::NeedMore;
}

}  // namespace

TEST_CASE("request head parsed in one piece and byte by byte", "[http]") {
  const std::string req =
      "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: localhost:8001\r\nX-Multi: a\r\n"
      "Accept: */*\r\n\r\n";
  for (size_t step : {req.size(), size_t{1}, size_t{7}}) {
    Http1Parser p(Http1Parser::Kind::Request);
    std::string body;
    REQUIRE(feed_all(p, req, step, body) == Status::MessageComplete);
    REQUIRE(p.head_ready());
    CHECK(p.head().method == "GET");
    CHECK(p.head().target == "/api/v1/pods?watch=1");
    REQUIRE(p.head().headers.size() == 3);
    CHECK(*p.head().find("host") == "localhost:8001");
    CHECK(p.head().keep_alive);
    CHECK_FALSE(p.head().upgrade);
    CHECK(body.empty());
  }
}

TEST_CASE("chunked request body is de-chunked and pipelined bytes are left over", "[http]") {
  const std::string req =
      "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET /next HTTP/1.1\r\n";
  for (size_t step : {req.size(), size_t{1}, size_t{3}}) {
    Http1Parser p(Http1Parser::Kind::Request);
    std::string body, rest;
    REQUIRE(feed_all(p, req, step, body, &rest) == Status::MessageComplete);
    CHECK(p.head().chunked);
    CHECK(body == "hello world");
    CHECK(rest == "GET /next HTTP/1.1\r\n");
  }
}

TEST_CASE("content-length body and reset for keep-alive", "[http]") {
  Http1Parser p(Http1Parser::Kind::Request);
  std::string body;
  REQUIRE(feed_all(p, "PUT /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 100, body) ==
          Status::MessageComplete);
  CHECK(body == "abc");
  CHECK(p.head().content_length == 3u);
  p.reset();
  CHECK(p.idle());
  body.clear();
  REQUIRE(feed_all(p, "GET /b HTTP/1.1\r\n\r\n", 100, body) == Status::MessageComplete);
  CHECK(p.head().target == "/b");
}

TEST_CASE("smuggling attempts are rejected", "[http]") {
  const char* cases[] = {
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n b\r\nX: y\rZ\r\n\r\n",
  };
  for (const char* c : cases) {
    INFO(c);
    Http1Parser p(Http1Parser::Kind::Request);
    std::string body;
    CHECK(feed_all(p, c, 1000, body) == Status::Invalid);
    CHECK(p.error_status() == 400);
    CHECK_FALSE(p.error().empty());
  }
}

TEST_CASE("oversized head is rejected with 431 even when fed slowly", "[http]") {
  Http1Parser p(Http1Parser::Kind::Request, 1024);
  std::string req = "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n";
  std::string body;
  CHECK(feed_all(p, req, 10, body) == Status::Invalid);
  CHECK(p.error_status() == 431);
  // A head just under the limit passes.
  Http1Parser q(Http1Parser::Kind::Request, 1024);
  std::string ok = "GET / HTTP/1.1\r\nX-Big: " + std::string(900, 'a') + "\r\n\r\n";
  CHECK(feed_all(q, ok, 10, body) == Status::MessageComplete);
}

TEST_CASE("upgrade and CONNECT complete at the end of the head", "[http]") {
  Http1Parser p(Http1Parser::Kind::Request);
  std::string body, rest;
  REQUIRE(feed_all(p,
                   "GET /exec HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
                   "\x01\x02raw",
                   1000, body, &rest) == Status::MessageComplete);
  CHECK(p.head().upgrade);
  CHECK(rest == "\x01\x02raw");

  Http1Parser c(Http1Parser::Kind::Request);
  REQUIRE(feed_all(c, "CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n\x16\x03", 1000,
                   body, &rest) == Status::MessageComplete);
  CHECK(c.head().method == "CONNECT");
  CHECK(c.head().target == "10.0.0.1:443");
  CHECK(c.head().upgrade);
  CHECK(rest == "\x16\x03");
}

TEST_CASE("responses: chunked stream, 101, HEAD, and read-until-close", "[http]") {
  {
    Http1Parser p(Http1Parser::Kind::Response);
    auto r = p.feed(
        std::string_view("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nev1\n\r\n"));
    CHECK(r.status == Status::NeedMore);
    CHECK(r.head_complete);
    REQUIRE(r.body.size() == 1);
    CHECK(r.body[0] == "ev1\n");
    CHECK(p.head().status == 200);
    CHECK(p.head().reason == "OK");
    r = p.feed(std::string_view("0\r\n\r\n"));
    CHECK(r.status == Status::MessageComplete);
  }
  {
    Http1Parser p(Http1Parser::Kind::Response);
    std::string body, rest;
    REQUIRE(
        feed_all(p,
                 "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nabc",
                 1000, body, &rest) == Status::MessageComplete);
    CHECK(p.head().upgrade);
    CHECK(rest == "abc");
  }
  {
    Http1Parser p(Http1Parser::Kind::Response);
    p.expect_no_body(true);
    std::string body;
    CHECK(feed_all(p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", 1000, body) ==
          Status::MessageComplete);
  }
  {
    Http1Parser p(Http1Parser::Kind::Response);
    std::string body;
    CHECK(feed_all(p, "HTTP/1.1 200 OK\r\n\r\nuntil close", 1000, body) == Status::NeedMore);
    CHECK(body == "until close");
    CHECK(p.finish());
    CHECK_FALSE(p.head().keep_alive);
  }
  {
    Http1Parser p(Http1Parser::Kind::Response);
    std::string body;
    CHECK(feed_all(p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1000, body) ==
          Status::NeedMore);
    CHECK_FALSE(p.finish());
  }
}

TEST_CASE("header tokens", "[http]") {
  Http1Parser p(Http1Parser::Kind::Request);
  std::string body;
  REQUIRE(
      feed_all(p, "GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
               1000, body) == Status::MessageComplete);
  CHECK(p.head().has_token("connection", "upgrade"));
  CHECK_FALSE(p.head().has_token("connection", "close"));
}

TEST_CASE("HTTP/1.0 without keep-alive closes", "[http]") {
  Http1Parser p(Http1Parser::Kind::Request);
  std::string body;
  REQUIRE(feed_all(p, "GET / HTTP/1.0\r\n\r\n", 1000, body) == Status::MessageComplete);
  CHECK_FALSE(p.head().keep_alive);
  CHECK(p.head().version_minor == 0);
}

TEST_CASE("a response status that is not three digits is refused", "[http]") {
  // Found by http1_response_fuzz: http-parser reads "20" as a status.
  for (std::string_view line : {"HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 099 Low\r\n\r\n"}) {
    Http1Parser p(Http1Parser::Kind::Response);
    INFO(line);
    CHECK(p.feed(line).status == Http1Parser::Status::Invalid);
  }
  Http1Parser ok(Http1Parser::Kind::Response);
  auto r = ok.feed("HTTP/1.1 100 Continue\r\n\r\n");
  CHECK(r.status != Http1Parser::Status::Invalid);
  CHECK(ok.head().status == 100);
}
