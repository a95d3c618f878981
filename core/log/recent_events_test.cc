#include "core/log/recent_events.h"

#include <catch2/catch.hpp>
#include <string>

using konn::core::log::RecentEvents;

TEST_CASE("recent events keep the newest ones, oldest first, and count them all", "[log]") {
  RecentEvents<std::string> events(3);
  CHECK(events.snapshot().empty());
  for (int i = 0; i < 5; ++i) events.record("event-" + std::to_string(i));
  auto kept = events.snapshot();
  REQUIRE(kept.size() == 3);
  CHECK(kept.front() == "event-2");
  CHECK(kept.back() == "event-4");
  CHECK(events.total() == 5);
  CHECK(events.capacity() == 3);
}

TEST_CASE("recent events with no room only count", "[log]") {
  RecentEvents<int> events(0);
  events.record(1);
  events.record(2);
  CHECK(events.snapshot().empty());
  CHECK(events.total() == 2);
}
