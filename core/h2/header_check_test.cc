#include "core/h2/header_check.h"

#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

using konn::core::h2::HeaderBlockCheck;
using Fields = std::vector<std::pair<std::string, std::string>>;

namespace {

// Feeds `fields` and ends the block; returns the error ("" when the block passes).
std::string check(HeaderBlockCheck::Kind kind, const Fields& fields, bool end_stream = false) {
  HeaderBlockCheck c(kind);
  for (const auto& [k, v] : fields) c.add(k, v);
  c.finish(end_stream);
  return c.error();
}

Fields request(std::string authority) {
  return {{":method", "POST"},
          {":scheme", "http"},
          {":path", "/ProxyService/Proxy"},
          {":authority", std::move(authority)},
          {"content-type", "application/grpc"},
          {"te", "trailers"}};
}

}  // namespace

TEST_CASE("header check: any printable :authority passes", "[h2][headers]") {
  for (const char* a : {"/etc/kubernetes/konnectivity-server/konnectivity-server.socket",
                        "localhost", "127.0.0.1:8090", "[::1]:8131", "", "%2Frun%2Fa%20b.sock",
                        "unix:///tmp/x.sock", "host name with spaces"}) {
    CAPTURE(a);
    CHECK(check(HeaderBlockCheck::Kind::Request, request(a)).empty());
  }
}

TEST_CASE("header check: what is unsafe or malformed is refused", "[h2][headers]") {
  using K = HeaderBlockCheck::Kind;
  CHECK_THAT(check(K::Request, request("a\r\nb")), Catch::Contains(":authority"));
  CHECK_THAT(check(K::Request, request(std::string("a\0b", 3))), Catch::Contains(":authority"));
  auto with = [](std::string k, std::string v) {
    auto f = request("localhost");
    f.emplace_back(std::move(k), std::move(v));
    return f;
  };
  CHECK_THAT(check(K::Request, with("AgentID", "a")), Catch::Contains("upper-case"));
  CHECK_THAT(check(K::Request, with("a b", "1")), Catch::Contains("invalid header name"));
  CHECK_THAT(check(K::Request, with("x", "a\nb")), Catch::Contains("control byte"));
  CHECK_THAT(check(K::Request, with("x", std::string("a\0", 2))), Catch::Contains("control byte"));
  CHECK(check(K::Request, with("x", "a\tb")).empty());
  CHECK(check(K::Request, with("x", " leading and trailing ")).empty());
  for (const char* h : {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                        "upgrade"}) {
    CAPTURE(h);
    CHECK_THAT(check(K::Request, with(h, "x")), Catch::Contains("connection-specific"));
  }
  CHECK_THAT(check(K::Request, with("te", "gzip")), Catch::Contains("te"));
  CHECK_THAT(check(K::Request, with(":path", "/again")), Catch::Contains("after a regular"));
  CHECK_THAT(check(K::Request, with("content-length", "1x")), Catch::Contains("not a number"));
  CHECK_THAT(check(K::Request, {{":method", "POST"}, {":method", "POST"}}), Catch::Contains("twice"));
  CHECK_THAT(check(K::Request, {{":status", "200"}}), Catch::Contains("not allowed"));
  CHECK_THAT(check(K::Request, {{":method", "POST"}, {":scheme", "http"}}),
             Catch::Contains("without :path"));
  CHECK_THAT(check(K::Request, {{":method", "POST"}, {":path", "/"}}),
             Catch::Contains("without :scheme"));
  CHECK_THAT(check(K::Request, {{":method", "POST"}, {":scheme", "http"}, {":path", ""}}),
             Catch::Contains("empty :path"));
  CHECK(check(K::Request, {{":method", "CONNECT"}, {":authority", "a:1"}}).empty());
  CHECK_THAT(check(K::Response, {{"content-type", "application/grpc"}}),
             Catch::Contains("without :status"));
  CHECK_THAT(check(K::Response, {{":status", "20"}}), Catch::Contains("three digits"));
  CHECK_THAT(check(K::Trailers, {{":status", "200"}}, true), Catch::Contains("in trailers"));
  CHECK_THAT(check(K::Trailers, {{"grpc-status", "0"}}, false), Catch::Contains("END_STREAM"));
  CHECK(check(K::Trailers, {{"grpc-status", "0"}}, true).empty());
}

TEST_CASE("header check: content-length is read", "[h2][headers]") {
  HeaderBlockCheck c(HeaderBlockCheck::Kind::Request);
  for (const auto& [k, v] : request("x")) c.add(k, v);
  c.add("content-length", "42");
  CHECK(c.finish(false));
  CHECK(c.content_length() == 42u);
  HeaderBlockCheck twice(HeaderBlockCheck::Kind::Request);
  twice.add("content-length", "1");
  CHECK_FALSE(twice.add("content-length", "2"));
}

namespace {

std::string head(uint32_t len, uint8_t type, uint8_t flags, uint32_t id) {
  return {static_cast<char>(len >> 16), static_cast<char>(len >> 8), static_cast<char>(len),
          static_cast<char>(type),      static_cast<char>(flags),    static_cast<char>(id >> 24),
          static_cast<char>(id >> 16),  static_cast<char>(id >> 8),  static_cast<char>(id)};
}

}  // namespace

TEST_CASE("frame scan: DATA or HEADERS after the peer ended or reset a stream", "[h2][headers]") {
  using konn::core::h2::FrameScan;
  const std::string preface(24, 'P');
  const std::string request = head(3, 1, 0x4, 1) + "abc";          // HEADERS, stream 1
  const std::string ended = head(2, 0, 0x1, 1) + "xy";              // DATA END_STREAM
  const std::string window = head(4, 8, 0, 1) + std::string(4, 0);  // WINDOW_UPDATE: allowed
  const std::string more = head(1, 0, 0, 1) + "z";                  // DATA after the end
  SECTION("in one read") {
    FrameScan scan(24);
    const std::string in = preface + request + ended + window + more;
    auto v = scan.scan(in);
    REQUIRE(v);
    CHECK(v->stream_id == 1);
    CHECK(v->offset == in.size() - more.size());
  }
  SECTION("byte by byte") {
    FrameScan scan(24);
    const std::string in = preface + request + ended + window + more;
    std::optional<FrameScan::Violation> v;
    size_t at = 0;
    for (; at < in.size() && !v; ++at) v = scan.scan(std::string_view(in).substr(at, 1));
    REQUIRE(v);
    CHECK(at == in.size() - more.size() + 9);  // found once its head is whole
  }
  SECTION("after RST_STREAM") {
    FrameScan scan(0);
    auto v = scan.scan(request + head(4, 3, 0, 1) + std::string(4, 0) + head(3, 1, 0x5, 1) +
                       "abc");
    REQUIRE(v);
    CHECK(v->stream_id == 1);
  }
  SECTION("other streams and CONTINUATION go on") {
    FrameScan scan(0);
    CHECK_FALSE(scan.scan(head(3, 1, 0x1, 1) + "abc" + head(2, 9, 0x4, 1) + "de" +
                          head(3, 1, 0x4, 3) + "abc" + head(1, 0, 0, 3) + "q"));
  }
}
