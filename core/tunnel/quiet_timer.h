#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include <asio/any_io_executor.hpp>

namespace konn::core::tunnel {

// Ends a tunnel that has been quiet too long: once nothing moved for the current limit,
// `on_quiet` runs (once) on the timer's executor. The owner touches it whenever bytes move, in
// either direction, from any thread; a touch is one atomic store. The pending wait is never
// moved by a touch: it fires at its old deadline, finds later activity and waits again, so a busy
// tunnel wakes its timer about once per limit, not once per packet.
//
// Used for the bounds of docs/reliability.md "half-closed tunnels": --half-close-timeout (a
// tunnel with one side finished) and --tunnel-idle-timeout (any established tunnel).
//
// Thread-safe: every method may be called from any thread; the timer itself lives on `ex`, which
// must run on one thread at a time (a worker io_context, the server's timer context). The state
// the pending wait needs is shared with it, so the wait may outlive the QuietTimer. `on_quiet`
// must hold its owner weakly (the timer is usually the owner's member); it is not called once
// stop() or the destructor returned, unless it was already running.
class QuietTimer {
 public:
  using Clock = std::chrono::steady_clock;

  QuietTimer(asio::any_io_executor ex, std::function<void()> on_quiet);
  ~QuietTimer();
  QuietTimer(const QuietTimer&) = delete;
  QuietTimer& operator=(const QuietTimer&) = delete;

  // Bytes moved now.
  void touch();
  // From now on, `on_quiet` runs once nothing moved for `limit` (counted from the later of the
  // last touch and this call). A zero limit disarms it.
  void set_limit(Clock::duration limit);
  // `on_quiet` is not called any more.
  void stop();

 private:
  struct State;
  static void arm(const std::shared_ptr<State>& s);
  std::shared_ptr<State> state_;
};

}  // namespace konn::core::tunnel
