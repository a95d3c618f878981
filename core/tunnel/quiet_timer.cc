#include "core/tunnel/quiet_timer.h"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace konn::core::tunnel {
namespace {

int64_t now_ticks() { return QuietTimer::Clock::now().time_since_epoch().count(); }

}  // namespace

// Shared with the pending wait and the posted calls, so either may outlive the QuietTimer.
struct QuietTimer::State {
  State(const asio::any_io_executor& ex, std::function<void()> f)
      : executor(ex), timer(ex), on_quiet(std::move(f)) {}
  const asio::any_io_executor executor;  // read from any thread (never the timer's own state)
  asio::steady_timer timer;
  std::function<void()> on_quiet;          // executor only
  std::atomic<int64_t> last{now_ticks()};  // Clock ticks of the last touch
  std::atomic<bool> stopped{false};
  Clock::duration limit{0};  // executor only; 0: disarmed
  uint64_t generation = 0;   // executor only: of the wait that counts
  bool waiting = false;      // executor only: a wait of this generation is pending
  bool fired = false;        // executor only

  Clock::time_point deadline() const {
    return Clock::time_point(Clock::duration(last.load(std::memory_order_relaxed))) + limit;
  }
};

QuietTimer::QuietTimer(asio::any_io_executor ex, std::function<void()> on_quiet)
    : state_(std::make_shared<State>(ex, std::move(on_quiet))) {}

QuietTimer::~QuietTimer() { stop(); }

void QuietTimer::touch() { state_->last.store(now_ticks(), std::memory_order_relaxed); }

void QuietTimer::set_limit(Clock::duration limit) {
  touch();
  asio::post(state_->executor, [s = state_, limit] {
    if (s->stopped.load() || s->fired) return;
    s->limit = limit;
    if (limit.count() <= 0) {
      ++s->generation;  // a pending wait no longer counts
      s->waiting = false;
      s->timer.cancel();
      return;
    }
    arm(s);
  });
}

void QuietTimer::stop() {
  if (state_->stopped.exchange(true)) return;
  asio::post(state_->executor, [s = state_] {
    ++s->generation;
    s->waiting = false;
    s->on_quiet = nullptr;  // releases what it holds on the executor, not on the caller's thread
    s->timer.cancel();
  });
}

void QuietTimer::arm(const std::shared_ptr<State>& s) {
  auto deadline = s->deadline();
  // A pending wait that ends no later than the deadline is kept: it will wait again.
  if (s->waiting && s->timer.expiry() <= deadline) return;
  s->timer.expires_at(deadline);  // cancels a pending wait, whose generation is then stale
  s->waiting = true;
  uint64_t generation = ++s->generation;
  s->timer.async_wait([s, generation](std::error_code ec) {
    if (generation != s->generation) return;
    s->waiting = false;
    if (ec || s->stopped.load() || s->limit.count() <= 0) return;
    if (Clock::now() < s->deadline()) {  // touched since this wait began
      arm(s);
      return;
    }
    s->fired = true;
    auto f = std::move(s->on_quiet);
    s->on_quiet = nullptr;
    if (f) f();
  });
}

}  // namespace konn::core::tunnel
