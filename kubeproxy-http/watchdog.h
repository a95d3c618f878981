#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <asio/any_io_executor.hpp>

namespace konn::kubeproxy {

// Bounds the waits of one connection with a single timer that lives as long as the connection.
//
// A keep-alive connection waits once or twice per request. Bounding each wait with a timer of its
// own and an awaitable `||` cost two coroutine frames, a timer set and cancelled, and a
// cancellation slot per wait: about a sixth of kubeproxy-http's CPU per small request. Here
// arm() only moves a deadline. The timer already pending fires at its older time, finds the
// deadline later, and waits again, so a busy connection touches its timer about once per bound
// (90 s between requests), not once per read.
//
// When an armed deadline passes, `on_expire` runs (it cancels the connection's pending
// operations) and expired() stays true until the next arm(). A wait that finished meanwhile
// keeps its result: callers report a timeout only for a wait that failed.
//
// Not thread-safe: use it on the connection's executor, which runs on one thread.
class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  Watchdog(asio::any_io_executor ex, std::function<void()> on_expire);
  // `on_expire` is not called after this, even if the deadline has passed.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // From now until disarm(), a wait that lasts `limit` (> 0) expires.
  void arm(Clock::duration limit);
  void disarm();
  bool expired() const;

 private:
  struct State;
  static void wait(const std::shared_ptr<State>& s);
  std::shared_ptr<State> state_;
};

}  // namespace konn::kubeproxy
