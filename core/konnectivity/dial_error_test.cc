#include "core/konnectivity/dial_error.h"

#include <catch2/catch.hpp>

using namespace konn::core::konnectivity;

TEST_CASE("konnectivity: agent error texts are classified", "[konnectivity]") {
  CHECK(classify("dial tcp 127.0.0.1:1: connect: connection refused") == DialFailure::Refused);
  CHECK(classify("read tcp 10.0.0.1:443: connection reset by peer") == DialFailure::Refused);
  CHECK(classify("dial tcp 10.0.0.1:80: i/o timeout") == DialFailure::Timeout);
  CHECK(classify("context deadline exceeded") == DialFailure::Timeout);
  CHECK(classify("dial tcp 10.9.0.1:80: connect: network is unreachable") ==
        DialFailure::NetUnreachable);
  CHECK(classify("dial tcp 10.9.0.1:80: connect: no route to host") ==
        DialFailure::HostUnreachable);
  CHECK(classify("dial tcp: lookup nope.invalid on 10.96.0.10:53: no such host") ==
        DialFailure::HostUnreachable);
  CHECK(classify("currently no tunnels available: No agent available") == DialFailure::NoAgent);
  CHECK(classify("No agent available") == DialFailure::NoAgent);
  CHECK(classify("dial tcp 1.2.3.4:5: socket: too many open files") == DialFailure::Other);
}

TEST_CASE("konnectivity: HTTP statuses for dial errors", "[konnectivity]") {
  CHECK(http_status_for({DialFailure::Refused, "x", 0}) == 502);
  CHECK(http_status_for({DialFailure::Timeout, "x", 0}) == 504);
  CHECK(http_status_for({DialFailure::NoAgent, "x", 500}) == 503);
  CHECK(http_status_for({DialFailure::Other, "too many open files", 503}) == 503);
  CHECK(http_status_for({DialFailure::ProxyUnavailable, "x", 0}) == 502);
  CHECK(std::string(to_string(DialFailure::NoAgent)) == "no_agent");
}
