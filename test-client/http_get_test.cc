#include "test-client/http_get.h"

#include <deque>

#include <catch2/catch.hpp>

using namespace konn::testclient;
using namespace std::chrono_literals;

namespace {

// An in-memory ByteStream: records what is written, replays `replies` one piece per read.
class ScriptedStream final : public ByteStream {
 public:
  explicit ScriptedStream(std::deque<std::string> replies, std::string end_reason = {})
      : replies_(std::move(replies)), end_reason_(std::move(end_reason)) {}
  bool write(std::string_view bytes) override {
    written += bytes;
    return true;
  }
  bool close_write() override { return false; }
  std::optional<std::string> read() override {
    std::string out;
    if (read_for(&out, 0ms) == ReadStatus::Data) return out;
    return std::nullopt;
  }
  ReadStatus read_for(std::string* out, std::chrono::milliseconds) override {
    if (replies_.empty()) return ReadStatus::Eof;
    *out = std::move(replies_.front());
    replies_.pop_front();
    return ReadStatus::Data;
  }
  std::string close(std::chrono::milliseconds) override { return {}; }
  bool ended() const override { return replies_.empty(); }
  std::string end_reason() const override { return replies_.empty() ? end_reason_ : ""; }

  std::string written;

 private:
  std::deque<std::string> replies_;
  std::string end_reason_;
};

std::deque<std::string> bytewise(const std::string& s) {
  std::deque<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

}  // namespace

TEST_CASE("http_get over any byte stream: request line, Host, and a response in 1-byte pieces",
          "[testclient]") {
  ScriptedStream s(
      bytewise("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n0\r\n\r\n"));
  auto r = http_get(s, "10.0.0.5:10250", "healthz", 1s);
  CHECK(r.error.empty());
  CHECK(r.code == 200);
  CHECK(r.body == "hello");
  CHECK(s.written.rfind("GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:10250\r\n", 0) == 0);
  CHECK(s.written.find("Connection: close\r\n\r\n") != std::string::npos);
}

TEST_CASE("http_get over any byte stream: an end before the response is complete is an error",
          "[testclient]") {
  ScriptedStream s({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"}, "connection: reset");
  auto r = http_get(s, "h:1", "/", 1s);
  CHECK_FALSE(r.error.empty());
  CHECK(r.error.find("connection: reset") != std::string::npos);
}

TEST_CASE(
    "http_get over any byte stream: Content-Length, chunked with extensions and trailers, "
    "and a body until the end",
    "[testclient]") {
  {
    ScriptedStream s(
        bytewise("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nhelloEXTRA"));
    auto r = http_get(s, "h:1", "/", 1s);
    CHECK(r.error.empty());
    CHECK(r.code == 200);
    CHECK(r.body == "hello");
    CHECK(r.headers ==
          std::vector<std::pair<std::string, std::string>>{{"content-length", "5"}, {"x-a", "b"}});
  }
  {
    ScriptedStream s(
        bytewise("HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n"));
    auto r = http_get(s, "h:1", "/", 1s);
    CHECK(r.error.empty());
    CHECK(r.code == 404);
    CHECK(r.body == "abc0123456789");
  }
  {
    ScriptedStream s({"HTTP/1.0 200 OK\r\n\r\npart one ", "part two"});
    auto r = http_get(s, "h:1", "/", 1s);
    CHECK(r.error.empty());
    CHECK(r.body == "part one part two");
  }
}

TEST_CASE("http_get over any byte stream: an interim 100 is skipped, a 204 has no body",
          "[testclient]") {
  ScriptedStream s({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", "late"});
  auto r = http_get(s, "h:1", "/", 1s);
  CHECK(r.error.empty());
  CHECK(r.code == 204);
  CHECK(r.body.empty());
}

TEST_CASE("http_get over any byte stream: malformed responses are errors", "[testclient]") {
  for (std::string wire :
       {std::string("SSH-2.0-OpenSSH\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nContent-Length: x1\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        std::string("HTTP/1.1 20 OK\r\n\r\n"),
        "HTTP/1.1 200 OK\r\nX-Big: " + std::string(70 * 1024, 'a'), std::string()}) {
    INFO(wire.substr(0, 40));
    ScriptedStream s(wire.empty() ? std::deque<std::string>{} : std::deque<std::string>{wire});
    auto r = http_get(s, "h:1", "/", 1s);
    CHECK_FALSE(r.error.empty());
    CHECK(r.code == 0);
  }
}
