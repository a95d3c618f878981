#include "core/net/endpoint.h"

#include <catch2/catch.hpp>

using konn::core::net::parse_host_port;

TEST_CASE("host:port parses like Go's SplitHostPort", "[net]") {
  auto a = parse_host_port("127.0.0.1:8080");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  auto b = parse_host_port("[::1]:443");
  REQUIRE(b);
  CHECK(b->host == "::1");
  CHECK(b->to_string() == "[::1]:443");
  auto c = parse_host_port("node-1.example:10250");
  REQUIRE(c);
  CHECK(c->host == "node-1.example");
  for (const char* bad : {"", "host", "host:", "host:abc", "host:70000", "::1:80", "[::1]80"}) {
    INFO(bad);
    CHECK_FALSE(parse_host_port(bad));
  }
}
