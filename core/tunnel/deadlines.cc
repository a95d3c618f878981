#include "core/tunnel/deadlines.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace konn::core::tunnel {

// Shared with the timer's pending wait and the posted re-arms, so either may outlive the
// Deadlines.
struct Deadlines::State {
  State(const asio::any_io_executor& ex, Clock::duration s) : executor(ex), timer(ex), slack(s) {}
  const asio::any_io_executor executor;
  asio::steady_timer timer;  // executor only
  const Clock::duration slack;

  mutable std::mutex mu;
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> by_time;  // mu
  std::unordered_map<Id, Clock::time_point> by_id;                            // mu
  Id next_id = 1;                                                             // mu
  // When the timer fires (or will, once a posted re-arm ran); max(): it waits for nothing.
  Clock::time_point scheduled = Clock::time_point::max();  // mu
  bool stopped = false;                                    // mu
  uint64_t wakes = 0;                                      // mu
};

Deadlines::Deadlines(asio::any_io_executor ex, Clock::duration slack)
    : state_(std::make_shared<State>(ex, slack)) {}

Deadlines::~Deadlines() {
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> dropped;
  {
    std::lock_guard lock(state_->mu);
    state_->stopped = true;
    dropped.swap(state_->by_time);
    state_->by_id.clear();
  }
  // The callbacks (and what they hold) are released here, outside the lock; the timer's wait
  // is cancelled on its own thread.
  asio::post(state_->executor, [s = state_] { s->timer.cancel(); });
}

Deadlines::Id Deadlines::arm(Clock::duration delay, std::function<void()> fn) {
  auto due = Clock::now() + delay;
  bool rearm = false;
  Id id;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopped) return 0;
    id = state_->next_id++;
    state_->by_time.emplace(std::make_pair(due, id), std::move(fn));
    state_->by_id.emplace(id, due);
    // A timer that fires within `slack` after this deadline serves it as it is.
    if (due + state_->slack < state_->scheduled) {
      state_->scheduled = due + state_->slack;
      rearm = true;
    }
  }
  if (rearm) asio::post(state_->executor, [s = state_] { wait(s); });
  return id;
}

bool Deadlines::cancel(Id id) {
  if (id == 0) return false;
  std::function<void()> fn;  // released after the lock
  std::lock_guard lock(state_->mu);
  auto it = state_->by_id.find(id);
  if (it == state_->by_id.end()) return false;
  auto node = state_->by_time.find(std::make_pair(it->second, id));
  fn = std::move(node->second);
  state_->by_time.erase(node);
  state_->by_id.erase(it);
  return true;
}

size_t Deadlines::pending() const {
  std::lock_guard lock(state_->mu);
  return state_->by_id.size();
}

uint64_t Deadlines::wakes() const {
  std::lock_guard lock(state_->mu);
  return state_->wakes;
}

// On the executor: (re)starts the timer's wait for `scheduled`.
void Deadlines::wait(const std::shared_ptr<State>& s) {
  Clock::time_point at;
  {
    std::lock_guard lock(s->mu);
    if (s->stopped || s->scheduled == Clock::time_point::max()) return;
    at = s->scheduled;
  }
  s->timer.expires_at(at);  // a wait pending for a later time ends with operation_aborted
  s->timer.async_wait([s, at](std::error_code ec) {
    if (ec) return;  // re-armed for an earlier time, or stopped
    std::vector<std::function<void()>> due;
    {
      std::lock_guard lock(s->mu);
      if (s->stopped || s->scheduled != at) return;  // a later re-arm owns the timer now
      ++s->wakes;
      auto now = Clock::now();
      while (!s->by_time.empty() && s->by_time.begin()->first.first <= now) {
        auto node = s->by_time.begin();
        s->by_id.erase(node->first.second);
        due.push_back(std::move(node->second));
        s->by_time.erase(node);
      }
      s->scheduled = s->by_time.empty() ? Clock::time_point::max()
                                        : s->by_time.begin()->first.first + s->slack;
    }
    wait(s);
    for (auto& fn : due) fn();
  });
}

}  // namespace konn::core::tunnel
