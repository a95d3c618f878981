#include "core/log/logger.h"

#include <catch2/catch.hpp>

#include "core/log/rate_limit.h"

using konn::core::log::get;
using konn::core::log::set_level;

TEST_CASE("log levels accept spdlog names and klog verbosity", "[log]") {
  REQUIRE(set_level("debug"));
  CHECK(get("test.a")->level() == spdlog::level::debug);
  REQUIRE(set_level("0"));
  CHECK(get("test.a")->level() == spdlog::level::info);
  REQUIRE(set_level("4"));
  CHECK(get("test.b")->level() == spdlog::level::debug);
  REQUIRE(set_level("9"));
  CHECK(get("test.a")->level() == spdlog::level::trace);
  CHECK_FALSE(set_level("loud"));
  CHECK_FALSE(set_level("-1"));
  REQUIRE(set_level("info"));
}

TEST_CASE("component loggers are shared by name", "[log]") {
  CHECK(get("test.same") == get("test.same"));
  CHECK(get("test.same") != get("test.other"));
}

TEST_CASE("a rate limit lets one line through per interval and counts the rest", "[log]") {
  using konn::core::log::RateLimit;
  using namespace std::chrono_literals;
  RateLimit limit(1s);
  auto t0 = RateLimit::Clock::now();
  uint64_t held = 99;
  REQUIRE(limit.allow_at(t0, &held));
  CHECK(held == 0);
  for (int i = 0; i < 5; ++i) CHECK_FALSE(limit.allow_at(t0 + 100ms * i, &held));
  CHECK_FALSE(limit.allow_at(t0 + 999ms, &held));
  REQUIRE(limit.allow_at(t0 + 1s, &held));
  CHECK(held == 6);
  // A quiet spell: the next occurrence is logged at once, with nothing held back.
  REQUIRE(limit.allow_at(t0 + 10s, &held));
  CHECK(held == 0);
}
