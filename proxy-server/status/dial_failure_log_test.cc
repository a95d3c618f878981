#include "proxy-server/status/dial_failure_log.h"

#include <catch2/catch.hpp>

using konn::server::DialFailureLog;

TEST_CASE("dial failure log keeps the newest entries and counts them all", "[server]") {
  DialFailureLog log(3);
  for (int i = 0; i < 5; ++i) {
    log.record({std::chrono::system_clock::now(), "error_response", "agent-" + std::to_string(i),
                "10.0.0.1:443", "connection refused"});
  }
  auto recent = log.recent();
  REQUIRE(recent.size() == 3);
  CHECK(recent.front().agent == "agent-2");  // oldest kept first
  CHECK(recent.back().agent == "agent-4");
  CHECK(log.total() == 5);
  CHECK(log.capacity() == 3);
}
