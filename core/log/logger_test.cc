#include "core/log/logger.h"

#include <catch2/catch.hpp>

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
