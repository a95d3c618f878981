#include "core/tunnel/tunnel_life.h"

#include <algorithm>

namespace konn::core::tunnel {

std::chrono::nanoseconds TunnelPolicy::quiet_limit(bool half_closed) const {
  if (!half_closed) return idle_timeout;
  if (idle_timeout.count() > 0) return std::min(half_close_timeout, idle_timeout);
  return half_close_timeout;
}

const char* to_string(TunnelLife::State s) {
  switch (s) {
    case TunnelLife::State::Idle:
      return "Idle";
    case TunnelLife::State::Dialing:
      return "Dialing";
    case TunnelLife::State::Established:
      return "Established";
    case TunnelLife::State::Closing:
      return "Closing";
    case TunnelLife::State::Closed:
      return "Closed";
  }
  return "?";
}

TunnelLife::TunnelLife(State initial) : state_(initial) {}

TunnelLife::~TunnelLife() {
  if (quiet_) quiet_->stop();
}

void TunnelLife::configure(const TunnelPolicy& policy, const asio::any_io_executor& ex,
                           std::function<void()> on_quiet) {
  policy_ = policy;
  credit_.store(kTunnelWindow);
  if (policy_.bounded() && !quiet_) {
    quiet_ = std::make_unique<QuietTimer>(ex, std::move(on_quiet));
  }
}

TunnelLife::State TunnelLife::enter(State next) {
  const State prev = state_;
  state_ = next;
  if (next == State::Established) ever_established_ = true;
  if (next == State::Established && quiet_ && policy_.idle_timeout.count() > 0) {
    quiet_->set_limit(policy_.idle_timeout);
  }
  return prev;
}

void TunnelLife::log_transition(spdlog::logger& log, std::string_view prefix, State next) const {
  log.log(spdlog::level::trace, "{}state {} -> {}", prefix, to_string(state_), to_string(next));
}

bool TunnelLife::queued_to_peer(size_t n) {
  const auto add = static_cast<int64_t>(n);
  if (to_peer_.fetch_add(add) + add <= policy_.to_peer_high) return false;
  return !queue_paused_.exchange(true);
}

bool TunnelLife::left_for_peer(size_t n) {
  const auto sub = static_cast<int64_t>(n);
  const int64_t left = to_peer_.fetch_sub(sub) - sub;
  return left <= policy_.to_peer_low && queue_paused_.load();
}

bool TunnelLife::resume_if_drained() {
  if (!queue_paused_.load() || to_peer_.load() > policy_.to_peer_low) return false;
  bool paused = true;
  return queue_paused_.compare_exchange_strong(paused, false);
}

bool TunnelLife::spend_credit(size_t n) {
  if (!policy_.flow_control) return false;
  const auto sub = static_cast<int64_t>(n);
  if (credit_.fetch_sub(sub) - sub > 0) return false;
  return !credit_paused_.exchange(true);
}

bool TunnelLife::add_credit(int64_t bytes) {
  if (credit_.fetch_add(bytes) + bytes <= 0) return false;
  bool paused = true;
  return credit_paused_.compare_exchange_strong(paused, false);
}

size_t TunnelLife::read_limit(size_t chunk) const {
  if (!policy_.flow_control) return chunk;
  return static_cast<size_t>(std::max<int64_t>(credit_.load(), 0));
}

int64_t TunnelLife::consumed(size_t n) {
  if (!policy_.flow_control) return 0;
  return credit_back_.written(n);
}

bool TunnelLife::one_side_finished(Side side) {
  finished_sending(side);
  if (half_counted_.load() || state_ != State::Established) return false;
  half_counted_.store(true);
  if (quiet_) quiet_->set_limit(policy_.quiet_limit(true));
  return true;
}

bool TunnelLife::end_half_close() {
  if (quiet_) quiet_->stop();
  return half_counted_.exchange(false);
}

int64_t TunnelLife::duration_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               started_)
      .count();
}

}  // namespace konn::core::tunnel
