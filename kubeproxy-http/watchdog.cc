#include "kubeproxy-http/watchdog.h"

#include <asio/steady_timer.hpp>

namespace konn::kubeproxy {

// Shared with the pending timer handler, so the handler can outlive the Watchdog safely.
struct Watchdog::State {
  State(asio::any_io_executor ex, std::function<void()> f)
      : timer(std::move(ex)), on_expire(std::move(f)) {}
  asio::steady_timer timer;
  std::function<void()> on_expire;                        // empty once the Watchdog is gone
  Clock::time_point deadline = Clock::time_point::max();  // max: disarmed
  uint64_t generation = 0;  // of the wait that counts; older handlers do nothing
  bool waiting = false;     // a wait of this generation is pending on `timer`
  bool expired = false;
};

Watchdog::Watchdog(asio::any_io_executor ex, std::function<void()> on_expire)
    : state_(std::make_shared<State>(std::move(ex), std::move(on_expire))) {}

Watchdog::~Watchdog() {
  state_->on_expire = nullptr;
  state_->deadline = Clock::time_point::max();
  ++state_->generation;
  state_->timer.cancel();  // the handler, if any, runs later and releases the state
}

void Watchdog::arm(Clock::duration limit) {
  State& s = *state_;
  s.expired = false;
  s.deadline = Clock::now() + limit;
  // A pending wait that ends no later than the new deadline is kept: it will wait again.
  if (s.waiting && s.timer.expiry() <= s.deadline) return;
  s.timer.expires_at(s.deadline);  // cancels the pending wait, whose generation is then stale
  wait(state_);
}

void Watchdog::disarm() { state_->deadline = Clock::time_point::max(); }

bool Watchdog::expired() const { return state_->expired; }

void Watchdog::wait(const std::shared_ptr<State>& s) {
  s->waiting = true;
  uint64_t generation = ++s->generation;
  s->timer.async_wait([s, generation](std::error_code ec) {
    if (generation != s->generation) return;
    s->waiting = false;
    if (ec || s->deadline == Clock::time_point::max()) return;
    if (Clock::now() < s->deadline) {  // armed again since this wait began
      s->timer.expires_at(s->deadline);
      wait(s);
      return;
    }
    s->expired = true;
    s->deadline = Clock::time_point::max();
    if (s->on_expire) s->on_expire();
  });
}

}  // namespace konn::kubeproxy
