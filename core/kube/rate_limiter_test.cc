#include "core/kube/rate_limiter.h"

#include <catch2/catch.hpp>

using namespace konn::core::kube;
using namespace std::chrono_literals;

TEST_CASE("the token bucket lets a burst through, then one call per 1/qps", "[kube][ratelimit]") {
  RateLimiter limiter(2.0, 3);  // a token every 500ms, three in the bucket
  auto t0 = RateLimiter::Clock::time_point{} + 1h;
  for (int i = 0; i < 3; ++i) CHECK(limiter.reserve_at(t0, 10s) == 0ns);
  // The bucket is empty: the next calls queue, each half a second after the previous.
  CHECK(limiter.reserve_at(t0, 10s) == 500ms);
  CHECK(limiter.reserve_at(t0, 10s) == 1000ms);
  // A call that cannot get its token within its bound reserves nothing...
  CHECK_FALSE(limiter.reserve_at(t0, 1s));
  // ...so the next one still gets the slot at 1.5s.
  CHECK(limiter.reserve_at(t0, 10s) == 1500ms);
  // After a quiet spell the bucket refills, but never beyond `burst`.
  auto later = t0 + 1h;
  for (int i = 0; i < 3; ++i) CHECK(limiter.reserve_at(later, 0s) == 0ns);
  CHECK_FALSE(limiter.reserve_at(later, 0s));
  CHECK(limiter.reserve_at(later + 250ms, 1s) == 250ms);
}

TEST_CASE("the flags keep client-go's meanings of 0 and negative values", "[kube][ratelimit]") {
  auto defaults = make_rate_limiter(0, 0);
  REQUIRE(defaults);
  CHECK(defaults->qps() == 5.0);
  CHECK(defaults->burst() == 10);
  auto burst_only = make_rate_limiter(0, 40);
  REQUIRE(burst_only);
  CHECK(burst_only->qps() == 5.0);
  CHECK(burst_only->burst() == 40);
  auto both = make_rate_limiter(0.5, 2);
  REQUIRE(both);
  CHECK(both->qps() == 0.5);
  CHECK(both->burst() == 2);
  CHECK(make_rate_limiter(-1, 0) == nullptr);  // a negative qps turns the limit off

  CHECK_FALSE(rate_limit_flags_error(0, 0));
  CHECK_FALSE(rate_limit_flags_error(-1, 0));
  CHECK_FALSE(rate_limit_flags_error(20, 40));
  CHECK(rate_limit_flags_error(20, 0)->find("--kubeconfig-burst") == 0);
  CHECK(rate_limit_flags_error(0, -1)->find("--kubeconfig-burst") == 0);
}
