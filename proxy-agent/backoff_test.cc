#include "proxy-agent/backoff.h"

#include <catch2/catch.hpp>

using konn::agent::Backoff;
using std::chrono::milliseconds;

TEST_CASE("backoff grows by 1.5 from the initial delay, caps, jitters up to 10%", "[agent]") {
  Backoff b(milliseconds(1000), milliseconds(10000));
  double expected = 1000;
  for (int i = 0; i < 12; ++i) {
    auto d = std::chrono::duration_cast<milliseconds>(b.next()).count();
    double base = std::min(expected, 10000.0);
    CHECK(d >= static_cast<int64_t>(base) - 1);
    CHECK(d <= static_cast<int64_t>(base * 1.1) + 1);
    expected *= 1.5;
  }
  // Capped: many more failures never exceed cap * 1.1.
  for (int i = 0; i < 100; ++i) CHECK(b.next() <= milliseconds(11000));
}

TEST_CASE("backoff reset starts again from the initial delay", "[agent]") {
  Backoff b(milliseconds(200), milliseconds(5000));
  for (int i = 0; i < 8; ++i) b.next();
  CHECK(b.next() >= milliseconds(5000));
  b.reset();
  auto d = b.next();
  CHECK(d >= milliseconds(200));
  CHECK(d <= milliseconds(220));
}

TEST_CASE("jitter is spread, not constant", "[agent]") {
  Backoff b(milliseconds(1000), milliseconds(1000));
  auto first = b.jittered(milliseconds(1000));
  bool differs = false;
  for (int i = 0; i < 50 && !differs; ++i) differs = b.jittered(milliseconds(1000)) != first;
  CHECK(differs);
}
