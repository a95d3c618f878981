#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

namespace konn::core::log {

// Lets one log line through per interval and counts the ones it held back, so a flood of one
// event (a client hammering a limit) costs a line per interval, not one per event. The event's
// counter metric still counts every occurrence. Thread-safe, lock-free. Typical use:
//
//   static core::log::RateLimit limit;
//   if (uint64_t held; limit.allow(&held)) KONN_LOG(log, warn, "refused {} ({} more)", who, held);
class RateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateLimit(Clock::duration interval = std::chrono::seconds(1)) : interval_(interval) {}

  // True when this occurrence should be logged; `*held_back` is then the number of occurrences
  // not logged since the previous one that was.
  bool allow(uint64_t* held_back) { return allow_at(Clock::now(), held_back); }

  // allow() at a given time (tests).
  bool allow_at(Clock::time_point now, uint64_t* held_back) {
    int64_t t = now.time_since_epoch().count();
    int64_t next = next_.load(std::memory_order_relaxed);
    if (t >= next && next_.compare_exchange_strong(next, t + interval_.count())) {
      *held_back = held_.exchange(0);
      return true;
    }
    held_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

 private:
  const Clock::duration interval_;
  std::atomic<int64_t> next_{std::numeric_limits<int64_t>::min()};
  std::atomic<uint64_t> held_{0};
};

}  // namespace konn::core::log
