#include "core/kube/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace konn::core::kube {

RateLimiter::RateLimiter(double qps, int burst) : qps_(qps), burst_(burst), tokens_(burst) {}

std::optional<RateLimiter::Clock::duration> RateLimiter::reserve(Clock::duration max_wait) {
  return reserve_at(Clock::now(), max_wait);
}

std::optional<RateLimiter::Clock::duration> RateLimiter::reserve_at(Clock::time_point now,
                                                                    Clock::duration max_wait) {
  std::lock_guard lock(mu_);
  double tokens = tokens_;
  if (last_ && now > *last_) {
    double elapsed = std::chrono::duration<double>(now - *last_).count();
    tokens = std::min<double>(burst_, tokens + elapsed * qps_);
  }
  tokens -= 1;
  Clock::duration wait{};
  if (tokens < 0) {
    wait =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens / qps_));
  }
  if (wait > max_wait) return std::nullopt;
  tokens_ = tokens;
  if (!last_ || now > *last_) last_ = now;
  return wait;
}

std::shared_ptr<RateLimiter> make_rate_limiter(double qps, int burst) {
  if (qps < 0) return nullptr;
  return std::make_shared<RateLimiter>(qps == 0 ? kDefaultApiQps : qps,
                                       burst == 0 ? kDefaultApiBurst : burst);
}

std::optional<std::string> rate_limit_flags_error(double qps, int burst) {
  if (!std::isfinite(qps)) return "--kubeconfig-qps: must be a finite number";
  if (burst < 0) return "--kubeconfig-burst: must not be negative (0 means client-go's 10)";
  if (qps > 0 && burst == 0) {
    return "--kubeconfig-burst: must be set (greater than 0) when --kubeconfig-qps is positive, "
           "as client-go requires";
  }
  return std::nullopt;
}

}  // namespace konn::core::kube
