#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <asio/any_io_executor.hpp>

namespace konn::core::tunnel {

// Deadlines that are nearly always cancelled before they pass: a tunnel's wait for DIAL_REQ,
// for DIAL_RSP, for CLOSE_RSP. All of them share one timer on `ex` (the server's timer thread).
// Arming or cancelling one takes a lock and touches neither the timer nor its thread, unless the
// new deadline is earlier than the one the timer already waits for: with an Asio timer per
// deadline, each arm and each cancel woke the timer thread, two context switches per dial.
//
// The timer waits for the earliest deadline plus `slack`, runs every callback whose deadline
// passed (in deadline order) and waits for the next one, or for nothing when none is left. So a
// callback runs between its deadline and about `slack` later, and never before it. A deadline
// cancelled before the timer wakes costs that wake nothing.
//
// Thread-safe: arm() and cancel() may be called from any thread, with locks of the caller held
// (the callbacks run on the executor, outside every lock of this class). The state the timer's
// wait needs is shared with it, so the wait may outlive the Deadlines; callbacks must hold their
// owners weakly. Pending callbacks are dropped, not run, when the Deadlines is destroyed.
class Deadlines {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;  // never 0

  Deadlines(asio::any_io_executor ex, Clock::duration slack);
  ~Deadlines();
  Deadlines(const Deadlines&) = delete;
  Deadlines& operator=(const Deadlines&) = delete;

  // `fn` runs on the executor once `delay` has passed, unless cancel(id) came first.
  Id arm(Clock::duration delay, std::function<void()> fn);
  // True when the deadline was still pending: its callback will not run. False for 0, an id
  // already run or cancelled.
  bool cancel(Id id);
  // Deadlines armed and neither run nor cancelled.
  size_t pending() const;
  // How many times the timer woke up (tests: to show that cancelled deadlines cost no wake).
  uint64_t wakes() const;

 private:
  struct State;
  static void wait(const std::shared_ptr<State>& s);
  std::shared_ptr<State> state_;
};

}  // namespace konn::core::tunnel
