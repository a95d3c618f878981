#include "core/config/duration.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using konn::core::config::format_go_duration;
using konn::core::config::parse_go_duration;

TEST_CASE("Go durations parse like time.ParseDuration", "[config]") {
  CHECK(parse_go_duration("0") == 0ns);
  CHECK(parse_go_duration("500ms") == 500ms);
  CHECK(parse_go_duration("30s") == 30s);
  CHECK(parse_go_duration("1h") == 1h);
  CHECK(parse_go_duration("2h45m") == 2h + 45min);
  CHECK(parse_go_duration("1.5s") == 1500ms);
  CHECK(parse_go_duration("-1s") == -1s);
  CHECK(parse_go_duration("10us") == 10us);
  CHECK(parse_go_duration("10\xC2\xB5s") == 10us);
  CHECK(parse_go_duration("7ns") == 7ns);
  CHECK(parse_go_duration(".5m") == 30s);
}

TEST_CASE("bad Go durations are rejected", "[config]") {
  for (const char* bad : {"", "5", "s", "1x", "1.s5", "ms", "1 s", "9999999999h", "--1s"}) {
    INFO(bad);
    CHECK_FALSE(parse_go_duration(bad).has_value());
  }
}

TEST_CASE("Go durations format like Duration.String", "[config]") {
  CHECK(format_go_duration(0ns) == "0s");
  CHECK(format_go_duration(1h) == "1h0m0s");
  CHECK(format_go_duration(1500ms) == "1.5s");
  CHECK(format_go_duration(300ms) == "300ms");
  CHECK(format_go_duration(90s) == "1m30s");
  CHECK(format_go_duration(-5s) == "-5s");
}
