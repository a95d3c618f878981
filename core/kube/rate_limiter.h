#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace konn::core::kube {

// client-go's defaults for a client whose QPS and Burst are left at 0 (rest.DefaultQPS,
// rest.DefaultBurst).
inline constexpr double kDefaultApiQps = 5.0;
inline constexpr int kDefaultApiBurst = 10;

// A client-side limit on calls to the apiserver, with client-go's meaning
// (flowcontrol.NewTokenBucketRateLimiter): a bucket of `burst` tokens, full at the start, refilled
// at `qps` tokens per second; each call takes one token, and waits for it when the bucket is empty.
// Calls are served in the order they reserve. Thread-safe: daemons share one limiter between the
// io_contexts that make calls.
//
// reserve() never blocks: it tells the caller how long to wait, and the caller waits on a timer
// of its own executor, so a waiting call delays only itself.
class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // Precondition: qps > 0 and burst >= 1 (see make_rate_limiter for the flags' meanings).
  RateLimiter(double qps, int burst);

  // Takes the next token: returns how long the caller must wait before its call (zero when a
  // token is there), or nullopt, reserving nothing, when that wait would pass `max_wait`.
  std::optional<Clock::duration> reserve(Clock::duration max_wait);
  // As reserve(), at an explicit time (tests).
  std::optional<Clock::duration> reserve_at(Clock::time_point now, Clock::duration max_wait);

  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  const double qps_;
  const int burst_;
  std::mutex mu_;
  // Tokens at `last_`; negative when calls wait for tokens not yet refilled.
  double tokens_;
  std::optional<Clock::time_point> last_;
};

// The limiter for --kubeconfig-qps / --kubeconfig-burst as upstream's client (client-go) reads
// them: qps 0 means 5, burst 0 means 10, a negative qps means no limit (nullptr). Call only with
// values validate_rate_limit_flags accepts.
std::shared_ptr<RateLimiter> make_rate_limiter(double qps, int burst);

// The errors of a --kubeconfig-qps / --kubeconfig-burst pair, each naming its flag: a negative
// burst, or a positive qps without a positive burst (client-go refuses to build that client, so
// upstream does not start either).
std::optional<std::string> rate_limit_flags_error(double qps, int burst);

}  // namespace konn::core::kube
