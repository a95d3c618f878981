#include "tests/support/prom_text.h"

#include <catch2/catch.hpp>

using konn::testsupport::parse_prometheus_text;

TEST_CASE("prometheus text: the strict parser rejects what Prometheus rejects", "[support]") {
  CHECK(parse_prometheus_text("# TYPE a counter\na 1\n").errors.empty());
  CHECK(parse_prometheus_text("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                              "h_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n")
            .errors.empty());
  CHECK_FALSE(parse_prometheus_text("a 1").errors.empty());               // no final newline
  CHECK_FALSE(parse_prometheus_text("1a 1\n").errors.empty());            // bad name
  CHECK_FALSE(parse_prometheus_text("a{b=\"c} 1\n").errors.empty());      // open quote
  CHECK_FALSE(parse_prometheus_text("a{b=\"\\t\"} 1\n").errors.empty());  // bad escape
  CHECK_FALSE(parse_prometheus_text("a one\n").errors.empty());           // bad value
  CHECK_FALSE(parse_prometheus_text("a 1\nb 1\na 2\n").errors.empty());   // split family
  CHECK_FALSE(parse_prometheus_text("a{x=\"1\"} 1\na{x=\"1\"} 2\n").errors.empty());
  CHECK_FALSE(parse_prometheus_text("a 1\n# TYPE a counter\n").errors.empty());
  CHECK_FALSE(parse_prometheus_text("# TYPE a counter\na -1\n").errors.empty());
  CHECK_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                                    "h_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n")
                  .errors.empty());  // not cumulative
  CHECK_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 3\n"
                                    "h_count 1\n")
                  .errors.empty());  // no +Inf
}

TEST_CASE("prometheus text: a series is looked up as it is exposed, labels in any order",
          "[support]") {
  auto p = parse_prometheus_text(
      "# TYPE r counter\nr{code=\"00\",kind=\"a b\"} 3\nr{code=\"05\",kind=\"a b\"} 1\n"
      "g 7\n");
  REQUIRE(p.errors.empty());
  CHECK(p.value_of("g") == 7);
  CHECK(p.value_of(R"(r{code="05",kind="a b"})") == 1);
  CHECK(p.value_of(R"(r{kind="a b",code="00"})") == 3);
  CHECK_FALSE(p.value_of(R"(r{code="05"})"));  // a series names every label
  CHECK_FALSE(p.value_of("r"));
  CHECK_FALSE(p.value_of("missing"));
  CHECK_FALSE(p.value_of("r{code=}"));  // not a series
}
